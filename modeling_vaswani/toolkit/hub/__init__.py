"""Sharing a checkpoint on the Hugging Face Hub: what a push uploads and deletes, its model card and the upload
(`push`)."""
