"""Where a study's results live: the study database, one optuna study per cell
(`database.py`: `Store`, `StoredTrial`), and the storage URLs that name it (`storage_url.py`:
parse, check, open; SQLite in the study folder by default, PostgreSQL on a server), and the
identity migrations that read it (`migrations.py`: a study recorded under an earlier default
keeps its cells; a look kept under an earlier key is read under its stable one).
"""
