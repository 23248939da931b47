"""Other toolkits' models: Marian and fairseq checkpoints converted in, CTranslate2 exported out."""
