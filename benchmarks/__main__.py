from thunder_ext.benchmarks.suite import main

# guarded: the compile-time case spawns a process, which imports this module again under another name
if __name__ == "__main__":
    main(prog="python -m thunder_ext.benchmarks")
