from carbonlite.cli import main

main()
