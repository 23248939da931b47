"""The folder a converter or exporter writes: new or empty, so that its model is never mixed with other files."""

from pathlib import Path


def check_new_folder(output_dir: Path, error: type[Exception] = ValueError) -> None:
    """Raises `error` for an `output_dir` that exists and is not an empty folder."""
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise error(f"output folder {output_dir} exists and is not an empty folder; expected a new one")
