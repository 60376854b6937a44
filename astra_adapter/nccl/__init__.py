"""NCCL in genie's models: its tuner's choices (tuning), a cluster as NCCL sees it (hardware), a call's time with
fitted parameters (model), fitting them to real nccl-tests (fit, observations), "are my numbers expected?"
(expected) and the calibration file (calibration_io). docs/nccl-model.md."""
