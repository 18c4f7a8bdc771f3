"""Analysis of finished trials: EDFs, stability measures, plots and the report."""
