"""Section 5 on transformers' Seq2SeqTrainer (`trainer`), the presets (`presets`), checkpoint averaging (Section
6.1, `averaging`), the time budget's plan (`budget`, from the main job's runs measured: measurements.json), made
again as the run trains (`replanning`), the step's speed (`step`: the fused label-smoothed loss, bfloat16
autocast where a probe finds it faster), and the jobs built on them: vaswani-train (`recipe`) and vaswani-ablate
(`ablation`, Table 3), whose --help shows the project's flags (`flags`)."""
