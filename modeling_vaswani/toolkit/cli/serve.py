"""Serves models over HTTP: JSON endpoints to translate, score and show attention, and a page to look at it.

vaswani-serve runs/small/averaged                 # open http://127.0.0.1:8000; POST /translate {"text": "..."}
vaswani-serve runs/small/averaged runs/en-fr/averaged --port 8080
"""

import argparse

from ..runtime import apply_process_settings
from ..serving.engines import load_translator
from .arguments import add_model_arguments, positive_int
from .shell import command


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model folders (or Hub ids, or exported folders), loaded once")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    parser.add_argument("--port", type=positive_int, default=8000)
    parser.add_argument("--window_ms", type=positive_int, default=10, help="how long a batch waits for more requests")
    parser.add_argument("--max_tokens", type=positive_int, default=4000, help="source tokens a batch may hold")
    add_model_arguments(parser)
    return parser.parse_args(argv)


@command("vaswani-serve")
def main(argv=None):
    apply_process_settings()  # the toolkit's settings for this process (toolkit/runtime.py)
    arguments = parse_arguments(argv)
    import uvicorn

    from ..serving.server import create_app  # needs the serve extra, and says so

    # Requests name a model as it was given here (the first is the default).
    loading = (arguments.revision, arguments.trust_remote_code, arguments.engine)
    models = {name: load_translator(name, *loading) for name in arguments.models}
    app = create_app(models, arguments.window_ms / 1000, arguments.max_tokens, arguments.max_input_tokens)
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level="info")


if __name__ == "__main__":
    main()
