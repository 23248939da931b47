"""The conformance points of transformers 5 (shared/docs/transformers5-notes.md) and the model's invariants."""

import pytest
import torch
from helpers.attention_by_hand import KINDS, attention_inputs, expected_maps
from helpers.tiny_models import PAD, padded_batch, tiny_model
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from modeling_vaswani.modeling_vaswani import shift_tokens_right


def forward_inputs(lengths=(6, 3, 5), target_lengths=(4, 5, 2)):
    input_ids, attention_mask = padded_batch(list(lengths), seed=3)
    labels, _ = padded_batch(list(target_lengths), seed=4)
    labels[labels == PAD] = -100
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def test_return_dict_false_gives_a_tuple():
    model = tiny_model()
    inputs = forward_inputs()
    with torch.no_grad():
        as_dict = model(**inputs)
        as_tuple = model(**inputs, return_dict=False)
    assert isinstance(as_tuple, tuple)
    assert torch.equal(as_tuple[0], as_dict.loss) and torch.equal(as_tuple[1], as_dict.logits)


def test_attention_modules_declare_causality():
    model = tiny_model()
    assert all(not layer.self_attn.is_causal for layer in model.model.encoder.layers)
    assert all(layer.self_attn.is_causal for layer in model.model.decoder.layers)
    assert all(not layer.cross_attn.is_causal for layer in model.model.decoder.layers)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_encoder_sees_both_ways_and_decoder_only_backwards(implementation):
    """Without padding the masks are skipped; SDPA must still not make the encoder causal (Section 3.2.3)."""
    model = tiny_model(attn_implementation=implementation)
    source = torch.tensor([[5, 6, 7, 8, 2]])
    changed_source = torch.tensor([[5, 6, 7, 9, 2]])
    target = torch.tensor([[1, 10, 11, 12]])
    changed_target = torch.tensor([[1, 10, 11, 13]])
    with torch.no_grad():
        encoded = model.model.encoder(source).last_hidden_state
        encoded_changed = model.model.encoder(changed_source).last_hidden_state
        logits = model(input_ids=source, decoder_input_ids=target).logits
        logits_changed = model(input_ids=source, decoder_input_ids=changed_target).logits
    assert not torch.allclose(encoded[0, 0], encoded_changed[0, 0])  # position 0 sees a later token
    assert torch.allclose(logits[0, :3], logits_changed[0, :3], atol=1e-6)  # earlier positions never see later ones
    assert not torch.allclose(logits[0, 3], logits_changed[0, 3])


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_kernels_agree_with_padding():
    inputs = forward_inputs()
    logits = {}
    for implementation in ("eager", "sdpa", "flex_attention"):
        model = tiny_model(attn_implementation=implementation)
        with torch.no_grad():
            logits[implementation] = model(**inputs).logits
    assert (logits["sdpa"] - logits["eager"]).abs().max() < 1e-5
    assert (logits["flex_attention"] - logits["eager"]).abs().max() < 1e-5


def test_output_attentions_returns_all_three_maps():
    model = tiny_model(attn_implementation="eager")
    inputs = forward_inputs()
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
    config = model.config
    batch, source_length = inputs["input_ids"].shape
    target_length = inputs["labels"].shape[1]
    assert len(outputs.encoder_attentions) == config.encoder_layers
    assert len(outputs.decoder_attentions) == len(outputs.cross_attentions) == config.decoder_layers
    assert outputs.encoder_attentions[0].shape == (batch, config.num_heads, source_length, source_length)
    assert outputs.decoder_attentions[0].shape == (batch, config.num_heads, target_length, target_length)
    assert outputs.cross_attentions[0].shape == (batch, config.num_heads, target_length, source_length)
    for maps in (outputs.encoder_attentions, outputs.decoder_attentions, outputs.cross_attentions):
        for weights in maps:
            assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    future = torch.triu(torch.ones(target_length, target_length, dtype=torch.bool), diagonal=1)
    assert outputs.decoder_attentions[0][..., future].abs().max() == 0  # masked decoder self-attention
    padded_keys = inputs["attention_mask"] == 0
    assert (
        outputs.cross_attentions[0]
        .permute(0, 2, 1, 3)[padded_keys[:, None, None, :].expand(-1, target_length, config.num_heads, -1)]
        .abs()
        .max()
        == 0
    )


@pytest.mark.parametrize("lengths", [(7,), (6, 3, 5)], ids=["unpadded", "padded"])
def test_output_attentions_on_sdpa_are_equation_1_for_that_call_alone(lengths):
    """SDPA computes no weights: a call asking for them gets Equation 1's, every layer of each kind, with the causal
    mask SDPA leaves implicit when nothing is padded (unpadded), and the model stays on SDPA."""
    model = tiny_model()
    assert model.config._attn_implementation == "sdpa"
    input_ids, attention_mask = padded_batch(list(lengths), seed=3)
    decoder_input_ids, _ = padded_batch([5] * len(lengths), seed=4)
    with attention_inputs(model) as inputs, torch.no_grad():
        outputs = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            output_attentions=True,
        )
    assert model.config._attn_implementation == "sdpa"
    returned = {
        "encoder": outputs.encoder_attentions,
        "decoder": outputs.decoder_attentions,
        "cross": outputs.cross_attentions,
    }
    expected = expected_maps(model, inputs, attention_mask)
    assert [len(returned[kind]) for kind in KINDS] == [model.config.encoder_layers] + [model.config.decoder_layers] * 2
    for kind in KINDS:
        for layer, (weights, by_hand) in enumerate(zip(returned[kind], expected[kind], strict=True)):
            assert weights.shape == by_hand.shape and torch.allclose(weights, by_hand, atol=1e-5), (kind, layer)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_padding_never_leaks(implementation):
    model = tiny_model(attn_implementation=implementation)
    batch_ids, batch_mask = padded_batch([8, 3, 5], seed=5)
    targets, _ = padded_batch([6, 6, 6], seed=6)
    for row in range(3):
        length = int(batch_mask[row].sum())
        alone = {"input_ids": batch_ids[row : row + 1, :length], "attention_mask": batch_mask[row : row + 1, :length]}
        batched = {"input_ids": batch_ids, "attention_mask": batch_mask}
        with torch.no_grad():
            logits_alone = model(**alone, decoder_input_ids=targets[row : row + 1]).logits
            logits_batched = model(**batched, decoder_input_ids=targets).logits[row : row + 1]
        assert (logits_alone - logits_batched).abs().max() < 1e-5
        for num_beams in (1, 4):
            generated_alone = model.generate(**alone, num_beams=num_beams, max_new_tokens=8)
            generated_batched = model.generate(**batched, num_beams=num_beams, max_new_tokens=8)[row : row + 1]
            width = generated_alone.shape[1]
            assert torch.equal(generated_alone, generated_batched[:, :width])
            assert (generated_batched[:, width:] == PAD).all()


def test_labels_are_shifted_right_into_decoder_inputs():
    labels = torch.tensor([[7, 8, 2], [9, 2, -100]])
    assert shift_tokens_right(labels, pad_token_id=0, decoder_start_token_id=1).tolist() == [[1, 7, 8], [1, 9, 2]]


def test_loss_ignores_minus_100_and_matches_a_hand_computation():
    model = tiny_model()
    inputs = forward_inputs()
    with torch.no_grad():
        outputs = model(**inputs)
    log_probs = torch.log_softmax(outputs.logits, dim=-1)
    labels = inputs["labels"]
    picked = [
        -log_probs[b, t, labels[b, t]]
        for b in range(labels.shape[0])
        for t in range(labels.shape[1])
        if labels[b, t] != -100
    ]
    assert outputs.loss.item() == pytest.approx(torch.stack(picked).mean().item(), rel=1e-6)


def test_loss_under_gradient_accumulation_equals_the_full_batch():
    """With num_items_in_batch, two micro-batches of unequal token counts give the full batch's gradient."""
    model = tiny_model()
    inputs = forward_inputs(lengths=(6, 3, 5, 4), target_lengths=(6, 2, 2, 3))
    num_items = int((inputs["labels"] != -100).sum())

    model.zero_grad()
    model(**inputs).loss.backward()
    full = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    for part in (slice(0, 1), slice(1, 4)):
        micro = {key: value[part] for key, value in inputs.items()}
        model(**micro, num_items_in_batch=num_items).loss.backward()
    accumulated = [p.grad for p in model.parameters()]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(full, accumulated, strict=True))

    model.zero_grad()  # a plain mean per micro-batch (the bug the Trainer's num_items_in_batch exists to avoid)
    for part in (slice(0, 1), slice(1, 4)):
        micro = {key: value[part] for key, value in inputs.items()}
        (model(**micro).loss / 2).backward()
    assert not all(
        torch.allclose(a, b, atol=1e-6) for a, b in zip(full, (p.grad for p in model.parameters()), strict=True)
    )


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def test_trainer_gradient_accumulation_and_label_smoothing(tmp_path):
    """Through the real Seq2SeqTrainer: 1 batch of 4 == 2 accumulated batches of 2; smoothing as computed by hand."""
    inputs = forward_inputs(lengths=(6, 3, 5, 4), target_lengths=(6, 2, 2, 3))
    rows = [{key: value[i] for key, value in inputs.items()} for i in range(4)]
    weights = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        model = tiny_model(dropout=0.0)
        arguments = Seq2SeqTrainingArguments(
            output_dir=str(tmp_path / f"run{batch_size}"),
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            learning_rate=0.5,
            optim="sgd",
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            use_cpu=True,
            train_sampling_strategy="sequential",
        )
        Seq2SeqTrainer(model=model, args=arguments, train_dataset=ListDataset(rows)).train()
        weights.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*weights, strict=True))

    epsilon = 0.1
    model = tiny_model(dropout=0.0)
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "smooth"), label_smoothing_factor=epsilon, report_to=[], use_cpu=True
    )
    trainer = Seq2SeqTrainer(model=model, args=arguments)
    batch = dict(inputs, decoder_input_ids=model.prepare_decoder_input_ids_from_labels(inputs["labels"]))
    with torch.no_grad():
        smoothed = trainer.compute_loss(model, dict(batch)).item()
        log_probs = torch.log_softmax(model(**batch).logits, dim=-1)
    labels = batch["labels"]
    mask = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0][mask].mean()
    uniform = -log_probs.mean(-1)[mask].mean()  # cross-entropy against the uniform distribution
    assert smoothed == pytest.approx(((1 - epsilon) * nll + epsilon * uniform).item(), rel=1e-5)


def test_gradient_checkpointing_gives_the_same_gradients():
    inputs = forward_inputs()
    gradients = []
    for checkpointing in (False, True):
        model = tiny_model(dropout=0.1).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        torch.manual_seed(7)  # the same dropout masks; checkpointing replays the RNG state
        model(**inputs).loss.backward()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert gradients[0].keys() == gradients[1].keys()
    assert all(torch.allclose(gradients[0][n], gradients[1][n], atol=1e-6) for n in gradients[0])


def test_bfloat16_weights():
    model = tiny_model()
    inputs = forward_inputs()
    with torch.no_grad():
        reference = model(**inputs).logits
        model = model.to(torch.bfloat16)
        logits = model(**inputs).logits
    assert logits.dtype == torch.bfloat16
    assert model.model.encoder.positional_encoding.table.dtype == torch.bfloat16
    assert (logits.float() - reference).abs().max() < 0.1
    generated = model.generate(
        input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], max_new_tokens=5
    )
    assert generated.shape[0] == 3


def test_torch_compile_of_the_forward_pass():
    model = tiny_model()
    inputs = forward_inputs()
    compiled = torch.compile(model)
    with torch.no_grad():
        expected = model(**inputs).logits
        actual = compiled(**inputs).logits
    assert (actual - expected).abs().max() < 1e-5


@pytest.mark.parametrize("init_std", [None, 0.02])
def test_initialization_is_tensor2tensors_or_a_fixed_normal(init_std):
    """None: embeddings N(0, d_model^-0.5), Xavier-uniform linears (tensor2tensor); a number: N(0, init_std) for all"""
    model = tiny_model(seed=6, d_model=64, d_ff=256, init_std=init_std)
    embedding = model.get_input_embeddings().weight
    assert embedding.std().item() == pytest.approx(64**-0.5 if init_std is None else init_std, rel=0.1)
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    assert {tuple(linear.weight.shape) for linear in linears} >= {(64, 64), (256, 64), (64, 256)}
    for linear in linears:
        if linear.weight is embedding:
            continue  # the pre-softmax linear is the shared embedding (Section 3.4)
        fan_out, fan_in = linear.weight.shape
        if init_std is None:  # U(-a, a) with a = sqrt(6 / (fan_in + fan_out)): std a / sqrt(3)
            bound = (6 / (fan_in + fan_out)) ** 0.5
            assert linear.weight.abs().max().item() <= bound
            assert linear.weight.std().item() == pytest.approx(bound / 3**0.5, rel=0.1)
        else:
            assert linear.weight.std().item() == pytest.approx(init_std, rel=0.1)
        if linear.bias is not None:
            assert linear.bias.abs().sum() == 0
