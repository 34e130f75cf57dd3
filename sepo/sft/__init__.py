"""The SFT warm-start: demonstrator transcripts (`sepo data`) and TRL SFTTrainer + LoRA (`sepo sft`).

    data.py        demonstrator mixtures -> prompt-completion rows (the `sepo data` entry point)
    rationales.py  the one-line reasoning written before each demonstrated action
    train.py       SEPOSFTConfig, SFT, merge to a full checkpoint (the `sepo sft` entry point)
"""
