from capsim.commands.main import main

main()
