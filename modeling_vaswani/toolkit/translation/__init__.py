"""Translating: one request and its check, the one home of every refusal a translation can get (`request`), the
engines that run it behind one interface (`engines`: PyTorch, CTranslate2 through `ctranslate2`, onnxruntime through
`onnxruntime`), batched translation (`translate`), documents and markup (`documents`), word alignments
(`alignment`), terminology (`terminology`), the registered pipeline (`pipeline`), scores of given translations
(`scoring`), the warning of a collapsed model (`collapse`), and the refusals' shape (`errors`) and argument rules
(`arguments`)."""
