"""Self-calibration of retrieval on the user's own knowledge base, without labels (``ragidx tune``).

pseudo_queries (queries made from the articles) → tuner (every candidate configuration replayed over
once-searched pools and scored) → calibrate (the pick) → stored (``tuning.json`` beside the index, valid
for that index only, applied by the engine under explicit settings).
"""

from ragidx.tuning.calibrate import calibrate
from ragidx.tuning.stored import TuningResult, apply_tuning, load_tuning, save_tuning, tuning_path

__all__ = ["TuningResult", "apply_tuning", "calibrate", "load_tuning", "save_tuning", "tuning_path"]
