"""Other toolkits' models: Marian (`marian`) and fairseq (`fairseq`) checkpoints converted in through one path
(`convert`), their pickles read weights-only (`pickles`); CTranslate2 (`ctranslate2`) and a stock MarianMT folder
(`marian_export`) exported out, and ONNX graphs (`onnx`) that onnxruntime and transformers.js run."""
