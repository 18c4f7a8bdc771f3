"""What a study will run: its (lr, wd) pairs (`sampling.py`), every trial with its config,
folder and key and the jobs that train them (`trials.py`: `plan`, `jobs`, `populations`), and
what they cost on a device, measured (`costs.py`).
"""
