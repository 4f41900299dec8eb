"""Inference: exported programs run through paddle.inference (predictor), images prepared as their
inference.yml says (preprocess), and exports that check their own answers (verify). The predict and export
stages wire the config to these; nothing here reads a Config.
"""
