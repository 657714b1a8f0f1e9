from efold.controller.cli import run

run()
