from diagnoser.cli import run

if __name__ == "__main__":  # the lab's engine core is a spawned process: it imports this module, and must not run the CLI
    run()
