"""What several test files share: study files and the processes they start, Ctrl-C, the peers' code and the batch given
to ppo_core and to them, the reading of an export's text, data-parallel and tiny training runs, a population's segment
trials made by hand, the dashboard's and the fuzz tests' inputs. Test files import from here (``from helpers.studies
import write_study``: tests/ is on the path, as conftest.py's directory), never from one another. The reward modules
that runs name as ``module:function`` (reward_functions.py, rank_rewards.py) and the scripts tests start by path or
``-m`` (claim_queued.py, end_of_launch.py) stay at tests/ top level, where those names find them."""
