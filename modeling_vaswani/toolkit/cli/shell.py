"""The one error shell of the commands: a refusal or an expected failure is one line and exit code 2; anything else
keeps its traceback (exit 1), since it is a bug to report.

Expected, and told in one line:
  - a ValueError (or TypeError) raised by this package's own code: the toolkit's refusals are ValueErrors whose
    message names the value, its file (and line) and what was expected. One raised inside a library we call is not
    ours to explain, and keeps its traceback;
  - an OSError of the environment (no space left, no permission, read-only disk, a missing file, ...), named with
    its file;
  - the Hub unreachable, or a repository, revision or file it does not have (huggingface_hub's errors, and the
    OSError transformers' hub module raises for them);
  - an optional extra not installed (an ImportError raised by our code, naming the extra);
  - Ctrl-C (exit 130, as shells report SIGINT).
"""

import errno
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

from ..runtime import apply_process_settings, quiet_deepspeed_on_cpu

PACKAGE = Path(__file__).resolve().parents[2]  # modeling_vaswani/

ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: "no space left on the disk; free space or write elsewhere",
    errno.EDQUOT: "disk quota exceeded; free space or write elsewhere",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.ENOENT: "no such file or folder",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EISDIR: "is a folder; expected a file",
    errno.EEXIST: "already exists",
    errno.EFBIG: "file too large for this file system or the process's limit",
    errno.EIO: "input/output error of the device",
    errno.ENAMETOOLONG: "the name is too long",
}


def command(name: str, process_settings: bool = True) -> Callable:
    """Decorates a command's `main(argv=None)`: its expected failures become `NAME: error: MESSAGE` and exit 2. The
    toolkit's settings for the process (`apply_process_settings`, toolkit/runtime.py) apply first, unless
    `process_settings` is False."""

    def decorate(main: Callable) -> Callable:
        @functools.wraps(main)
        def run(argv=None):
            quiet_deepspeed_on_cpu()
            if process_settings:
                apply_process_settings()
            try:
                return main(argv)
            except KeyboardInterrupt:
                print(f"{name}: interrupted; outputs are written aside and were left as they were", file=sys.stderr)
                raise SystemExit(130) from None
            except Exception as error:
                message = expected_failure(error)
                if message is None:
                    raise
                print(f"{name}: error: {message}", file=sys.stderr)
                raise SystemExit(2) from None

        run.error_shell = name
        return run

    return decorate


def expected_failure(error: BaseException) -> str | None:
    """The one line telling `error` to a user, or None for an unexpected failure."""
    if isinstance(error, (OfflineModeIsEnabled, LocalEntryNotFoundError)):
        return f"the Hugging Face Hub cannot be reached and the file is not cached: {error}"
    if isinstance(error, HfHubHTTPError):
        return f"the Hugging Face Hub refused or failed the request: {first_line(error)}"
    if isinstance(error, OSError) and raised_in(error, ("transformers.utils.hub", "huggingface_hub")):
        return " ".join(str(error).split())  # transformers' own message to the user, on one line
    if isinstance(error, OSError) and error.errno in ENVIRONMENT_ERRNOS:
        place = " -> ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
        return f"{place or 'a file'}: {ENVIRONMENT_ERRNOS[error.errno]} ({error.strerror or error})"
    if isinstance(error, (ValueError, TypeError, ImportError, OSError)) and raised_by_us(error):
        return str(error)
    return None


def raised_by_us(error: BaseException) -> bool:
    """Whether the innermost frame of `error`'s traceback is in this package (a deliberate check of ours)."""
    frame = innermost_frame(error)
    return frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(PACKAGE)


def raised_in(error: BaseException, modules: tuple[str, ...]) -> bool:
    """Whether the innermost frame of `error`'s traceback is in one of `modules` (or their submodules)."""
    frame = innermost_frame(error)
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return any(name == module or name.startswith(module + ".") for module in modules)


def innermost_frame(error: BaseException):
    traceback = error.__traceback__
    if traceback is None:
        return None
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    return traceback.tb_frame


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
