from diagnoser.cli import run

run()
