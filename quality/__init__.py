"""Decision quality: the project's labeled evaluation set and the figures read from it
(accuracy, Brier score, calibration, position bias, rotation survival)."""
