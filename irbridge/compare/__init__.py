"""Compare two captures of a model (front-ends, ONNX, StableHLO, files): node matching,
cost and numeric comparison, reports. See docs/compare.md."""

from irbridge.compare.match import Group, Matching, match, normalize_path
from irbridge.compare.report import Comparison, Difference, compare_models, to_dict, to_json
from irbridge.compare.sources import HOWS, Side, load_side, load_sides

__all__ = ["HOWS", "Comparison", "Difference", "Group", "Matching", "Side", "compare_models",
           "load_side", "load_sides", "match", "normalize_path", "to_dict", "to_json"]
