"""The input pipeline: how a dataset reaches the model, read by the trainer, the checks and the
report alike (none of it imports the trainer).

- On disk: `datasets.py` (the checks and loading of the catalogue's datasets, spec/catalogue.py,
  by format), `cifar.py` (CIFAR's pickles), `folders.py` (class folders), `shards.py`
  (WebDataset shards), `pack.py` (a class folder packed into shards).
- What a trial's images go through: `input_plan.py` (resolved once, read by both pipelines),
  `augment.py` (batched augmentation on the device, and the PIL policies), `tensor_policy.py`,
  `tensor_draws.py` and `tensor_ops.py` (auto-augment as batched tensor ops).
- Batches: `batches.py` (`TrainBatches`: in memory, or class folders through DataLoader workers,
  the "pil" pipeline), `tensor_folder.py` (class folders decoded on the device, "tensor"),
  `seeding.py` (every draw from the trial's seed and a position).
"""
