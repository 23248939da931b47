"""Where the toolkit writes: the one atomic writer, and the checks that an output is the command's own.

Every file and folder a command writes (translations, averaged, converted and exported models, tokenizers, plots,
results.json) is written aside under a hidden name in the same folder and renamed into place when complete, so that a
killed run, a full disk or an error leaves the earlier output whole. Each rule has its one home, a module each:

- `markers`: a folder written whole is known by what it holds, never by its names: MARKER, written into it last,
  names the command that wrote it and its entries (`check_owned`; an older version's output by `Output.legacy`).
- `paths`: an output path is resolved once (`resolve_output`): a symbolic link is followed, its target written,
  atomically, and the link kept. A target that is not a regular file (a device, a FIFO, a socket, anything under
  /dev or /proc such as /dev/stdout) is written in place (`writes_in_place`): renaming over /dev/null, as root may,
  would replace the device for every process. An output is never one of the command's inputs (`check_not_input`):
  compared by device and inode, whatever names it, standard input included.
- `locks`: one writer per output (`claim`): a lock file beside it, held with flock, which the kernel releases when
  its process ends, and which names its holder to the writer it refuses.
- `journal`: the lock file records every partial output or set-aside (by device and inode) before it can be left
  behind; `names`: the hidden names of what the package creates beside an output.
- `recovery`: the next writer, or a reader that finds the output missing (`restore_set_aside`), undoes what a killed
  run recorded and touches nothing else: a `.NAME.old` that no run of ours recorded is a user's, left alone, and
  refused by name where a replacement would need its name.
- `checks`: before any work, the output is the command's own, writable and with room, and its lock is taken.
- `writers`: `staged_file`, `staged_folder` and what is built on them; `modes`: what is written takes the
  permissions that `open` and `mkdir` give under the user's umask, whatever the library that wrote it chose.
- `failures`: a failure of the file system names the output file it was writing, as its writer declared it (`writing`:
  one file; `writing_natively`: the file a library call writing several writes by native code; `writing_into`: a
  staged folder's files), never a hidden copy; `errors`: `OutputError`, a refusal of an output.
"""

from .checks import check_output_file, check_output_folder, check_working_folder, check_writable
from .errors import OutputError
from .failures import write_failure, writing, writing_into, writing_natively
from .locks import claim, release, released_on_failure
from .markers import (
    ATTENTION_MAPS,
    AVERAGED,
    CONVERTED,
    MARKER,
    MODEL_OUTPUT,
    TOKENIZER_OUTPUT,
    TRAINED_TOKENIZER,
    Output,
    check_owned,
    marked_files,
    older_output,
)
from .paths import check_not_input, resolve_output
from .recovery import recover, restore_set_aside
from .writers import (
    atomic_text,
    move_files_into,
    save_figure,
    save_into,
    save_object,
    save_pretrained,
    staged_file,
    staged_folder,
    write_text,
)

__all__ = [
    "ATTENTION_MAPS",
    "AVERAGED",
    "CONVERTED",
    "MARKER",
    "MODEL_OUTPUT",
    "TOKENIZER_OUTPUT",
    "TRAINED_TOKENIZER",
    "Output",
    "OutputError",
    "atomic_text",
    "check_not_input",
    "check_output_file",
    "check_output_folder",
    "check_owned",
    "check_working_folder",
    "check_writable",
    "claim",
    "marked_files",
    "move_files_into",
    "older_output",
    "recover",
    "release",
    "released_on_failure",
    "resolve_output",
    "restore_set_aside",
    "save_figure",
    "save_into",
    "save_object",
    "save_pretrained",
    "staged_file",
    "staged_folder",
    "write_failure",
    "write_text",
    "writing",
    "writing_into",
    "writing_natively",
]
