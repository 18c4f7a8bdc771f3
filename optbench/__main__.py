from optbench.cli.app import main

main()
