"""`python -m birdjepa.launch --sweep FILE ...`: the command line of birdjepa.launch.sweep (see
its docstring, or --help). Exit status: 0 submitted (or, with --executor local, every job ended);
2 a bad sweep or setting, one line naming the entry and key; 128 + the signal when Ctrl-C,
SIGTERM or SIGHUP stopped it while it waited for local jobs (they save and stop first)."""

import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.config.command_line
import birdjepa.launch.job as job
import birdjepa.launch.launch_config as launch_config
import birdjepa.launch.sweep as sweep
import birdjepa.runtime.preemption


def main(argv: list[str] | None = None) -> int:
    try:
        lc = birdjepa.config.command_line.cli(
            argv, launch_config.LaunchConfig, prog="python -m birdjepa.launch",
            description=sweep.__doc__.split("\n\n")[0], toml=False)
        sweep.launch(lc)
    except (launch_config.SweepError, birdjepa.config.ConfigError) as e:
        return cli_args.fail(e)
    except sweep.Interrupted as e:
        job.say(str(e), sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:  # before or while submitting, not waiting
        job.say("interrupted: nothing further submitted", sys.stderr)
        return birdjepa.runtime.preemption.EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
