"""Who applies toolkit/runtime.py's process setting: every vaswani-* command and VaswaniTrainer, for their own process;
importing the toolkit and running the model do not.

Seen by its effect, as tests/toolkit/test_runtime.py measures it: with the setting, a 64 MiB block freed and allocated
again is served from malloc's heap without page faults; without it, glibc maps it afresh each time. Each case runs in a
fresh process, with none of the environment variables that would decide for it.
"""

import sys

import pytest
from helpers.malloc import FRESH_FAULTS, KEPT_FAULTS
from helpers.malloc import page_faults as measure
from helpers.training_setup import REPO, tiny_checkpoint

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings; Linux only")

COMMANDS = [path.stem for path in sorted(REPO.glob("modeling_vaswani/toolkit/cli/*.py"))]
COMMANDS.remove("__init__")
COMMANDS.remove("arguments")  # what the commands share, no command
COMMANDS.remove("shell")  # the error shell every command runs in, no command
COMMANDS.remove("serve")  # a server lives on after a burst: it leaves malloc as it is, to give the memory back

SETUP = """
import contextlib, importlib, io, pkgutil, sys, tempfile

mode, *argv = sys.argv[1:]
if mode == "command":  # a vaswani-* command run in this process, as its console script runs it
    name, *argv = argv
    command = importlib.import_module(f"modeling_vaswani.toolkit.cli.{name}")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        command.main(argv)
elif mode == "trainer":
    from helpers.tiny_models import tiny_model
    from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

    arguments = VaswaniTrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=True)
    VaswaniTrainer(model=tiny_model(), args=arguments)
elif mode == "imports and model":  # every toolkit module imported, the model trained a step and generated
    import modeling_vaswani.toolkit as toolkit
    from helpers.tiny_models import padded_batch, tiny_model

    for module in pkgutil.walk_packages(toolkit.__path__, "modeling_vaswani.toolkit."):
        if module.name != "modeling_vaswani.toolkit.interop.ctranslate2":  # needs the optional ctranslate2
            importlib.import_module(module.name)
    ids, mask = padded_batch([5, 3])
    model = tiny_model()
    model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, num_beams=2)
"""


def page_faults(*arguments) -> int:
    return measure(SETUP, *arguments)[1]


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_command_run_applies_it(tmp_path):
    """vaswani-translate run to the end on a tiny checkpoint: the setting holds in its process afterwards."""
    checkpoint = tiny_checkpoint(tmp_path / "tiny", lines=300)
    (tmp_path / "input.en").write_text("A man rides a bike.\n", encoding="utf-8")
    arguments = [checkpoint, "--input", tmp_path / "input.en", "--output", tmp_path / "output.de"]
    faults = page_faults("command", "translate", *arguments, "--max_new_tokens", 3)
    assert (tmp_path / "output.de").read_text(encoding="utf-8").count("\n") == 1  # the command did run
    assert faults <= KEPT_FAULTS


@pytest.mark.slow  # a process each: a minute or more on two cores
@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_applies_it_first(name):
    """Before its arguments are parsed: --help ends the command there."""
    assert page_faults("command", name, "--help") <= KEPT_FAULTS


@pytest.mark.slow
def test_the_server_leaves_it_as_it_is():
    """vaswani-serve gives back what a burst of requests took (docs/serving.md): glibc's defaults."""
    assert page_faults("command", "serve", "--help") > FRESH_FAULTS


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_trainer_applies_it():
    assert page_faults("trainer") <= KEPT_FAULTS


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_importing_the_toolkit_and_running_the_model_do_not():
    faults = page_faults("imports and model")
    assert faults > FRESH_FAULTS, f"only {faults} page faults: an import or the model changed malloc's settings"
