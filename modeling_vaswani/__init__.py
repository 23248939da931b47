"""modeling_vaswani: the Transformer of "Attention Is All You Need" (Vaswani et al. 2017) as a transformers model.

Importing the package registers the classes with transformers' Auto classes, and marks them for remote code so that
`save_pretrained` and `push_to_hub` write the `auto_map` and copy the model's code into the checkpoint. It also
registers the translation pipeline: `pipeline("vaswani-translation", model=...)`, the payload's pipeline with texts
split into sentences (toolkit/translation/pipeline.py: the splitter cannot travel as remote code, so a checkpoint
loaded with trust_remote_code=True where the package is not installed gets the payload's, which translates each text
whole).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from .configuration_vaswani import VaswaniConfig
from .modeling_vaswani import VaswaniForConditionalGeneration, VaswaniModel, VaswaniPreTrainedModel
from .pipeline_vaswani import VaswaniTranslationPipeline
from .remote_code_vaswani import TRANSLATION_TASK
from .toolkit.translation.pipeline import SplittingTranslationPipeline

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig)
AutoModel.register(VaswaniConfig, VaswaniModel)
AutoModelForSeq2SeqLM.register(VaswaniConfig, VaswaniForConditionalGeneration)

VaswaniConfig.register_for_auto_class()
VaswaniModel.register_for_auto_class("AutoModel")
VaswaniForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

PIPELINE_REGISTRY.register_pipeline(
    TRANSLATION_TASK, pipeline_class=SplittingTranslationPipeline, pt_model=AutoModelForSeq2SeqLM
)

__all__ = [
    "VaswaniConfig",
    "VaswaniPreTrainedModel",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "VaswaniTranslationPipeline",
    "SplittingTranslationPipeline",
]
