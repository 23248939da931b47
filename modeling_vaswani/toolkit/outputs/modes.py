"""What is written takes the permissions that `open` and `mkdir` give under the user's umask, whatever the library
that wrote it chose."""

import os


def settle_modes(folder) -> None:
    """Every file and folder under `folder`, and `folder` itself, with the permissions `open` and `mkdir` give a new
    one under the user's umask, whatever the library that wrote it chose (safetensors makes its files only their
    owner may read, mkdtemp its folders, and a copy keeps its source's mode)."""
    mask = umask()
    for root, folders, files in os.walk(folder):
        for name, mode in [*((name, 0o777) for name in folders), *((name, 0o666) for name in files)]:
            entry = os.path.join(root, name)
            if not os.path.islink(entry):  # a link has no mode of its own; chmod would change its target's
                os.chmod(entry, mode & ~mask)
    os.chmod(folder, 0o777 & ~mask)


def _umask_by_setting() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# os.umask reads the umask only by setting it, for the whole process: a file another thread creates in between gets
# the temporary mask. So it is set only here, once, while this module is imported (before any of its writes), and
# read from /proc/self/status (Linux 4.7 on) wherever that can be read, which also sees a later os.umask.
_UMASK_AT_IMPORT = _umask_by_setting()


def umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _UMASK_AT_IMPORT
