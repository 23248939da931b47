"""Other toolkits' models: Marian (`marian`) and fairseq (`fairseq`) checkpoints converted in through one path
(`convert`), their pickles read weights-only (`pickles`), and CTranslate2 exported out (`ctranslate2`)."""
