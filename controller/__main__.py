from efold.controller.cli import main

main()
