"""The SFT warm-start: demonstrator transcripts (`sepo data`) and TRL SFTTrainer + LoRA (`sepo sft`).

    data.py        each game's registered demonstrator and rationale -> prompt-completion rows (`sepo data`)
    train.py       SEPOSFTConfig, SFT, merge to a full checkpoint (the `sepo sft` entry point)
"""
