"""Shipping a trained run: `sepo export`, merging a PEFT adapter into its base, the model card."""
