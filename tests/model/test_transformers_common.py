"""transformers' own common model tests (`ModelTesterMixin`) and configuration tests (`ConfigTester`), run against
VaswaniModel, VaswaniForConditionalGeneration and VaswaniConfig, as transformers runs them against its own models.

The test files come from the sdist of the installed transformers version (tests/helpers/transformers_tests.py):
offline, this module is skipped, or fails where VASWANI_REQUIRE_TRANSFORMERS_TESTS=1 (CI).
transformers' generation mixin is not run (not shipped in the sdist); tests/model/test_generation.py covers generate().
"""

import unittest
from unittest import mock

import torch
from helpers.transformers_tests import load_or_skip
from transformers.models.auto import modeling_auto
from transformers.testing_utils import torch_device

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration, VaswaniModel

upstream = load_or_skip()
from transformers_upstream_tests.test_configuration_common import ConfigTester  # noqa: E402
from transformers_upstream_tests.test_modeling_common import ModelTesterMixin, ids_tensor  # noqa: E402


class VaswaniModelTester:
    """Tiny shapes, and inputs as a translation batch has them: ids past the special tokens, eos last, padding
    masked. Attribute names are those ModelTesterMixin reads."""

    def __init__(
        self,
        parent,
        batch_size=3,
        seq_length=7,
        is_training=True,
        vocab_size=99,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        dropout=0.1,
        attention_dropout=0.1,
        max_position_embeddings=32,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=0,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_position_embeddings = max_position_embeddings
        self.bos_token_id = bos_token_id
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def get_config(self) -> VaswaniConfig:
        return VaswaniConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            num_heads=self.num_attention_heads,
            d_ff=self.intermediate_size,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            max_position_embeddings=self.max_position_embeddings,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs(self):
        # Ids from 3 up: no accidental padding, bos or eos inside a sentence; each source ends with eos.
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        decoder_input_ids[:, 0] = self.decoder_start_token_id
        inputs_dict = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": input_ids.ne(self.pad_token_id),
            "decoder_attention_mask": decoder_input_ids.ne(self.pad_token_id),
        }
        return self.get_config(), inputs_dict

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class VaswaniModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (VaswaniModel, VaswaniForConditionalGeneration)
    is_encoder_decoder = True
    # The mixin skips this check for models whose configuration file has no copyright line from 2023 on (transformers'
    # older models, whose `_init_weights` are not all fixed yet); ours must pass it.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        # The mixin tells a base model (no loss: skipped by the training tests) from a seq2seq LM head (given labels)
        # by the class names in transformers' built-in tables, which hold transformers' own models only. Our package
        # registers its classes with AutoModel and AutoModelForSeq2SeqLM (modeling_vaswani/__init__.py): the tables
        # get those registrations for the test's duration.
        for names, mapping in (
            (modeling_auto.MODEL_MAPPING_NAMES, modeling_auto.MODEL_MAPPING),
            (
                modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
                modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING,
            ),
        ):
            registered = mapping[VaswaniConfig]
            patcher = mock.patch.dict(names, {VaswaniConfig.model_type: registered.__name__})
            patcher.start()
            self.addCleanup(patcher.stop)
        self.model_tester = VaswaniModelTester(self)
        self.config_tester = ConfigTester(
            self,
            config_class=VaswaniConfig,
            vocab_size=99,
            d_model=16,
            encoder_layers=2,
            decoder_layers=2,
            num_heads=4,
            d_ff=32,
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    @unittest.skip(
        reason="Asks for transformers' GenerationTesterMixin, which its sdist does not ship and we do not run (our "
        "stand-in is empty, so inheriting it would pass this check vacuously); tests/model/test_generation.py tests "
        "generate()"
    )
    def test_generation_tester_mixin_inheritance(self):
        pass

    def test_model_forward_shapes(self):
        """The tester's inputs give one hidden state per target position, and one logit per vocabulary entry."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        shape = (self.model_tester.batch_size, self.model_tester.seq_length)
        for model_class, width in (
            (VaswaniModel, config.d_model),
            (VaswaniForConditionalGeneration, config.vocab_size),
        ):
            model = model_class(config).to(torch_device).eval()
            with torch.no_grad():
                output = model(**{name: tensor.to(torch_device) for name, tensor in inputs.items()})[0]
            self.assertEqual(output.shape, (*shape, width))

    def test_attention_implementation_can_be_switched(self):
        """`set_attn_implementation` must switch a built model between kernels. The mixin's own tests of it
        (test_can_set_attention_dynamically*) skip themselves where transformers judges, from the model file's source,
        that the model cannot switch: set_attn_implementation then only logs, which this test turns into a failure."""
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            for implementation in ("eager", "sdpa"):
                model.set_attn_implementation(implementation)
                self.assertEqual(model.config._attn_implementation, implementation, model_class.__name__)
