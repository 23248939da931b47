"""A translation pipeline for Vaswani checkpoints: `pipeline("vaswani-translation", model=...)`.

transformers 5 removed its "translation" task (and refuses that name to any registered pipeline), so the package
registers this one under "vaswani-translation", and pushed checkpoints declare it in config.json (`custom_pipelines`)
for `trust_remote_code=True` where the package is not installed. Self-contained on purpose: it travels as remote code,
copied flat beside the model's code, so it imports only transformers and its siblings.
"""

from transformers import Pipeline


class VaswaniTranslationPipeline(Pipeline):
    """Translates text with a Vaswani model and its tokenizer.

    `pipe("A man rides a bike.")` returns `[{"translation_text": "..."}]`; a list of texts returns one such dict per
    text, in order (a list of dicts per text with `num_return_sequences` > 1). `batch_size=N` (at creation or per call)
    translates N texts per `generate()` call. Decoding is the paper's (Section 6.1: beam 4, GNMT length penalty 0.6,
    at most input length + 50 tokens) unless `paper_decoding=False`; other `generate()` arguments (`num_beams`,
    `length_penalty`, `max_new_tokens` without the paper's decoding, ...) pass through. `target_prefix="Ein Mann"`
    makes every translation of the call start with that text's tokens (generate()'s `target_prefix`).

    An empty text, or one of more tokens (`</s>` included) than `max_input_tokens` (by default the model's
    `max_position_embeddings`, the commands' default limit), is refused with a ValueError before any translating:
    under the paper's decoding (up to input length + 50 tokens) a text of thousands of tokens would run for minutes.
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False
    # Not `_pipeline_calls_generate`: that flag has Pipeline.__init__ set the generation arguments given at creation
    # apart, for a private method to merge into each call's. Without it every argument, at creation or per call,
    # takes the public route: `_sanitize_parameters`, whose results Pipeline merges (the call's over creation's),
    # then `_forward`.

    def __call__(self, inputs, **kwargs):
        if isinstance(inputs, list) and not inputs:
            return []
        results = super().__call__(inputs, **kwargs)
        # One dict per text for a list, as transformers 4's translation pipeline returned.
        if isinstance(inputs, list) and all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results

    def _sanitize_parameters(self, paper_decoding=None, max_input_tokens=None, target_prefix=None, **generate_kwargs):
        preprocess_params = {}
        if max_input_tokens is not None:
            if not isinstance(max_input_tokens, int) or isinstance(max_input_tokens, bool) or max_input_tokens < 1:
                raise ValueError(f"max_input_tokens={max_input_tokens!r}; expected an int of at least 1")
            preprocess_params["max_input_tokens"] = max_input_tokens
        forward_params = dict(generate_kwargs)
        if paper_decoding is not None:
            forward_params["paper_decoding"] = paper_decoding
        if target_prefix is not None:
            if not isinstance(target_prefix, str):
                raise ValueError(f"target_prefix={target_prefix!r}; expected a str, the start of every translation")
            forward_params["target_prefix"] = self.tokenizer(text_target=target_prefix, add_special_tokens=False)
        return preprocess_params, forward_params, {}

    def preprocess(self, text, max_input_tokens=None):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"expected a non-empty text to translate, got {text!r}")
        model_inputs = self.tokenizer(text, return_tensors="pt")
        length = model_inputs["input_ids"].shape[-1]
        limit = max_input_tokens or self.model.config.max_position_embeddings
        if length > limit:
            source = "max_input_tokens" if max_input_tokens else "the model's max_position_embeddings"
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise ValueError(
                f"the text is {length} tokens long, more than the limit of {limit} ({source}); expected a shorter "
                f"text: {shown!r}"
            )
        return model_inputs

    def _forward(self, model_inputs, paper_decoding=True, target_prefix=None, **generate_kwargs):
        texts = model_inputs["input_ids"].shape[0]
        if target_prefix is not None:
            generate_kwargs["target_prefix"] = [target_prefix["input_ids"]] * texts
        output_ids = self.model.generate(**model_inputs, paper_decoding=paper_decoding, **generate_kwargs)
        # (texts, sequences per text, length): the pipeline's iterator hands postprocess one text at a time.
        return {"output_ids": output_ids.reshape(texts, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs):
        texts = self.tokenizer.batch_decode(model_outputs["output_ids"][0], skip_special_tokens=True)
        return [{"translation_text": text} for text in texts]
