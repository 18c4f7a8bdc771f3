"""What a study will run: its (lr, wd) pairs (`sampling.py`), every trial with its config,
folder and key and the jobs that train them (`trials.py`: `plan`, `jobs`, `populations`), and
what they cost on a device (`costs.py`: the cache of measured figures and the arithmetic;
`cost_notes.py`: the plan's and `optbench status`'s lines about them). The measuring itself is
run/measuring.py's: it trains.
"""
