"""The leak of leak.py stopped early, as someone would stop a run whose memory they watch
climb: forty steps, no OOM yet. The log and a snapshot dumped at the stop are what they
would have (memory-leak, before the failure)."""
from common import dump, out, snapshot_on_oom
from leak import leaking_loop

snap = snapshot_on_oom(out("leak_no_oom.pickle"), max_entries=4000)
history = leaking_loop(40)
print("stopped by hand at step 40")
dump(snap)
