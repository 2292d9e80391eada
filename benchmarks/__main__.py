from thunder_ext.benchmarks.suite import main

main()
