"""Version shims for the transformers releases the payload supports (pyproject.toml's lower bound and up): the one
place that knows which release renamed what. Payload: imports only torch, transformers and its siblings."""

import functools
import inspect

from transformers.masking_utils import create_causal_mask

# transformers 5.24 renamed the cache argument of models' forward, of generate()'s model inputs and of its mask helpers
# from `past_key_values` to `cache` (5.23 knows only the old name): the name this transformers uses.
CACHE = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def output_cache(outputs):
    """The cache an output holds, under either name."""
    return outputs.get(CACHE)


def either_cache_name(forward):
    """A forward written with `past_key_values` that also takes it as `cache`, the name of transformers >= 5.24, under
    which the old name is deprecated as transformers' own models deprecate it (its `deprecate_kwarg`, which its
    common tests check)."""

    @functools.wraps(forward)
    def renamed(*args, cache=None, **kwargs):
        if cache is not None:
            kwargs["past_key_values"] = cache
        return forward(*args, **kwargs)

    if CACHE == "past_key_values":
        return renamed
    from transformers.utils.deprecation import deprecate_kwarg

    return deprecate_kwarg("past_key_values", version="5.40.0", new_name="cache")(renamed)
