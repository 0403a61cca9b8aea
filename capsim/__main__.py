from capsim.cli import main

main()
