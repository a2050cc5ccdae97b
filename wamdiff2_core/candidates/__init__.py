"""Candidate plans: K plans per frame from one batched decode, and the run-time scorers that
pick one (docs/candidates.md). Torch-free: the node and the simulator import it directly."""
from wamdiff2_core.candidates.config import (DIVERSITY, MAX_K, SCORER_NAMES,
                                             CandidateConfig, CandidateConfigError, Row,
                                             row_plan)
from wamdiff2_core.candidates.features import FEATURES, ScoringContext, feature_matrix
from wamdiff2_core.candidates.sets import Candidate, CandidateSet, Selection

__all__ = ["Candidate", "CandidateConfig", "CandidateConfigError", "CandidateSet", "DIVERSITY",
           "FEATURES", "MAX_K", "Row", "SCORER_NAMES", "ScoringContext", "Selection",
           "feature_matrix", "row_plan"]
