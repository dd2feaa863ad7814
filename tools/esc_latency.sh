#!/bin/bash
# Esc latency in the real app (tmux): a 3-reply chat, then N times Ctrl+R and Esc D s later;
# prints the seconds from Esc to "cancelled" on screen ("timeout": the reply ran on).
#   usage: tools/esc_latency.sh [D=2] [N=4]   (the models: the embedded default pair)
set -u
D=${1:-2}; N=${2:-4}
X=$(mktemp -d)
export XDG_CONFIG_HOME=$X/cfg XDG_DATA_HOME=$X/data XDG_STATE_HOME=$X/state  # no config, no history of yours
command -v skippy-tui >/dev/null || { echo "activate the venv with skippy-tui first" >&2; exit 2; }
tmux kill-session -t e2 2>/dev/null
tmux new-session -d -s e2 -x 120 -y 40 "skippy-tui --max-tokens 400; sleep 30"
for i in $(seq 1 240); do tmux capture-pane -p -t e2 | grep -q "ctx 0/" && break; sleep 0.5; done
ndone() { tmux capture-pane -p -t e2 | grep -oE "ctx [0-9]+/" | tail -1; }
for msg in "Write a long story about a brave knight." "Write another long story about a dragon." "Write a long essay about the history of Rome."; do
  before=$(ndone); tmux send-keys -t e2 "$msg" Enter
  for i in $(seq 1 300); do sleep 0.2; cur=$(ndone); [ "$cur" != "$before" ] && break; done
  sleep 0.5
done
echo "chat: $(ndone)"
for t in $(seq 1 $N); do
  before=$(ndone)
  tmux send-keys -t e2 C-r; sleep $D
  tmux send-keys -t e2 Escape; t0=$(date +%s.%N)
  lat=timeout
  for i in $(seq 1 200); do
    if tmux capture-pane -p -t e2 | grep -qE "cancelled · [0-9]+ tok"; then lat=$(python3 -c "import time;print(round(time.time()-$t0,2))"); break; fi
    sleep 0.03
  done
  tok=$(tmux capture-pane -p -t e2 | grep -oE "(cancelled|max_tokens|eos) · [0-9]+ tok" | tail -1)
  echo "try $t: Esc at ${D}s -> $lat s  ($tok)"
  for i in $(seq 1 300); do sleep 0.2; cur=$(ndone); [ "$cur" != "$before" ] && break; done
  sleep 1
done
tmux kill-session -t e2
rm -rf "$X"
