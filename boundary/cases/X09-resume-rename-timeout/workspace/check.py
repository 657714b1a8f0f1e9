import pathlib, sys
config = pathlib.Path("app/config.py").read_text()
main = pathlib.Path("app/main.py").read_text()
ok = "TIMEOUT_SECONDS = 45" in config and "TIMEOUT =" not in config and "config.TIMEOUT_SECONDS" in main
sys.exit(0 if ok and pathlib.Path("app/limits.py").is_file() else 1)
