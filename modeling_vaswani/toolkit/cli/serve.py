"""Serves models over HTTP: JSON endpoints to translate, score and show attention, a page to look at it, /metrics.

vaswani-serve runs/small/averaged                 # open http://127.0.0.1:8000; POST /translate {"text": "..."}
vaswani-serve runs/small/averaged runs/en-fr/averaged --port 8080
vaswani-serve runs/small/averaged --host 0.0.0.0 --api_keys_file keys.txt --rate_limit 120/minute

A text sent to /translate may hold a paragraph: it is split into sentences by the rules of the model's source language
(--source_lang for every served model, else the one each model's training recorded, else generic rules), and its
translations joined with its own spacing; `"split_sentences": false` in a request translates each text whole.

Beyond this machine (--host other than a loopback address) every API request must carry a key (Authorization: Bearer
KEY), unless --allow_anonymous is given. The address is taken before any model loads, so a port in use or out of
range is refused at once.
"""

import argparse
import ipaddress
import logging
import socket
import sys
from pathlib import Path

from ..data.sentences import check_language
from ..threads import decoding_sample
from ..translation.engines import load_translator
from ..translation.translate import source_language
from .arguments import add_model_arguments, add_threads_argument, check_models, chosen_threads, positive_int
from .shell import command


def port_number(text: str) -> int:
    """argparse type of --port: a TCP port, 1-65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {text!r}")
    return int(text)


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model folders (or Hub ids, or exported folders), loaded once")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    parser.add_argument("--port", type=port_number, default=8000)
    limits = parser.add_argument_group("limits (docs/serving.md)")
    limits.add_argument("--window_ms", type=positive_int, default=10, help="how long a batch waits for more requests")
    limits.add_argument("--max_tokens", type=positive_int, default=4000, help="source tokens a batch may hold")
    limits.add_argument("--max_body_bytes", type=positive_int, default=1_000_000, help="a request's body (413)")
    limits.add_argument("--max_texts", type=positive_int, default=256, help="texts (or pairs) a request")
    limits.add_argument("--max_chars", type=positive_int, default=5_000, help="characters a text")
    limits.add_argument(
        "--max_attention_tokens", type=positive_int, default=64, help="tokens of an /attention text (its answer "
        "grows with their square)",
    )  # fmt: skip
    limits.add_argument("--max_queue", type=positive_int, default=64, help="requests waiting; more get 503")
    limits.add_argument("--timeout_s", type=positive_int, default=60, help="a request's time limit (504)")
    limits.add_argument(
        "--body_timeout_s", type=positive_int, default=10, help="a body's time to arrive, from its headers (408); a "
        "request holds a place in flight only once its body is whole",
    )  # fmt: skip
    limits.add_argument(
        "--max_sentences", type=positive_int, default=1_000, help="sentences a request, its texts once split (413)"
    )
    limits.add_argument(
        "--max_request_tokens", type=positive_int, default=16_000, help="source tokens a request (413)"
    )
    limits.add_argument(
        "--max_answer_bytes", type=positive_int, default=16_000_000, help="an answer's size, estimated from what a "
        "request asks before any work (413)",
    )  # fmt: skip
    access = parser.add_argument_group("access")
    access.add_argument("--api_key", action="append", default=[], help="a key the API accepts (repeatable)")
    access.add_argument("--api_keys_file", type=Path, help="keys the API accepts, one a line")
    access.add_argument(
        "--allow_anonymous", action="store_true", help="serve without keys beyond this machine (--host)"
    )
    access.add_argument("--rate_limit", help="requests a client (key, else address) may make, e.g. 120/minute")
    access.add_argument(
        "--auth_failure_limit", default="20/minute", help="wrong or missing keys an address may send before all its "
        "API requests are refused (429) for the rest of the window",
    )  # fmt: skip
    parser.add_argument(
        "--source_lang",
        help="the language whose rules split texts into sentences, for every model (default: each model's source "
        "language, as its training recorded it; else generic rules)",
    )
    add_model_arguments(parser)
    add_threads_argument(parser)
    arguments = parser.parse_args(argv)
    check_language(arguments.source_lang, "--source_lang")  # refused before any model loads
    return arguments


def is_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is this machine's own."""
    addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    return all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses)


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound and listening before any model loads: a port in use is refused at once."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        raise ValueError(
            f"cannot listen on {host}:{port}: {error.strerror or error}; expected a free port on an address of "
            "this machine"
        ) from None
    return sock


# No apply_process_settings(): a server lives on after a burst, and glibc's default returns its memory then.
@command("vaswani-serve", process_settings=False)
def main(argv=None):
    arguments = parse_arguments(argv)
    from ..serving.bounds import Limits
    from ..serving.gate import read_keys
    from ..serving.server import create_app, serve  # needs the serve extra, and says so

    keys = read_keys(arguments.api_key, arguments.api_keys_file)
    if not keys and not arguments.allow_anonymous and not is_loopback(arguments.host):
        raise ValueError(
            f"--host {arguments.host} listens beyond this machine; expected --api_key or --api_keys_file (requests "
            "then carry Authorization: Bearer KEY), or --allow_anonymous to serve anyone"
        )
    sock = listening_socket(arguments.host, arguments.port)
    limits = Limits(
        max_body_bytes=arguments.max_body_bytes,
        max_texts=arguments.max_texts,
        max_chars=arguments.max_chars,
        max_input_tokens=arguments.max_input_tokens,
        max_attention_tokens=arguments.max_attention_tokens,
        max_tokens=arguments.max_tokens,
        max_queue=arguments.max_queue,
        timeout_s=arguments.timeout_s,
        body_timeout_s=arguments.body_timeout_s,
        max_sentences=arguments.max_sentences,
        max_request_tokens=arguments.max_request_tokens,
        max_answer_bytes=arguments.max_answer_bytes,
        window=arguments.window_ms / 1000,
    )
    # Requests name a model as it was given here (the first is the default).
    loading = (arguments.revision, arguments.trust_remote_code, arguments.engine)
    check_models(arguments.models, arguments.revision)  # each model found before the first loads
    models = {name: load_translator(name, *loading) for name in arguments.models}
    languages = {
        name: source_language(name, tokenizer, arguments.source_lang, arguments.revision)
        for name, (_, tokenizer) in models.items()
    }
    # Chosen on the first model, before the app's threads start: a thread takes torch's count at its first work.
    # Measured now, at startup, not at the first batch as the other commands do (chosen_threads' default): a server has
    # no input yet to refuse (its startup refusals all came above), its first batch is a request's, whose answer
    # should not wait for the measuring, and that batch runs on the worker thread, which the choice must precede.
    sample = decoding_sample(next(iter(models.values()))[0])
    with chosen_threads("vaswani-serve", sample, arguments.threads, "decoding", measure_now=True):
        app = create_app(
            models, limits, keys=keys, rate_limit=arguments.rate_limit, languages=languages,
            auth_failure_limit=arguments.auth_failure_limit,
        )  # fmt: skip
        logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")  # the access log's JSON
        serve(app, sock, arguments.timeout_s, arguments.body_timeout_s)


if __name__ == "__main__":
    main()
