#!/bin/bash
# Esc latency in the real app (tmux): a 3-reply chat, then N times Ctrl+R and Esc D s after
# the reply began; prints the seconds from Esc to "cancelled" on screen ("timeout": not within
# 60 s), the tokens the panel showed when Esc was sent and those the reply ended with.
# Before that, F2S times F2 with no reply running: the seconds from F2 to the dialog on screen.
#   usage: tools/esc_latency.sh [D=2] [N=4] [BURN=0] [F2S=0]   (the models: the embedded default pair)
# BURN: that many busy loops (one core each) run beside the app, in its own session (so the
# kernel's per-session autogroup does not shield the app from them), as another program's
# compile would. SKIPPY_TUI: the command that starts the app (default: skippy-tui on PATH).
# CHAT: replies before the tries (default 3); MAX_TOKENS: each reply's cap (default 400);
# THREADS: llama.cpp threads per model (default: the config's default), e.g. 1 on a machine
# already loaded by others, where two threads meeting at every barrier crawl.
# Its own tmux server (-L), so no one else's tmux session is touched.
set -u
D=${1:-2}; N=${2:-4}; BURN=${3:-0}; F2S=${4:-0}; CHAT=${CHAT:-3}; MAX_TOKENS=${MAX_TOKENS:-400}; THREADS=${THREADS:-}
APP=${SKIPPY_TUI:-skippy-tui}
X=$(mktemp -d)
export XDG_CONFIG_HOME=$X/cfg XDG_DATA_HOME=$X/data XDG_STATE_HOME=$X/state  # no config, no history of yours
if [ -n "$THREADS" ]; then
  mkdir -p "$XDG_CONFIG_HOME/skippy-tui"
  printf '[target]\nthreads = %s\nthreads_batch = %s\n' "$THREADS" "$THREADS" > "$XDG_CONFIG_HOME/skippy-tui/config.toml"
fi
command -v "${APP%% *}" >/dev/null || { echo "activate the venv with skippy-tui first (or set SKIPPY_TUI)" >&2; exit 2; }
T=(tmux -L "esc-latency-$$")
burners=""
[ "$BURN" -gt 0 ] && burners="for i in \$(seq $BURN); do sh -c 'while :; do :; done' & done; "
"${T[@]}" new-session -d -s e2 -x 120 -y 40 "$burners$APP --max-tokens $MAX_TOKENS; kill \$(jobs -p) 2>/dev/null; sleep 30"
for i in $(seq 1 480); do "${T[@]}" capture-pane -p -t e2 | grep -q "ctx 0/" && break; sleep 0.5; done
ndone() { "${T[@]}" capture-pane -p -t e2 | grep -oE "ctx [0-9]+/" | tail -1; }
idle() {  # until the context count moved from $1 and then stayed put for 3 s (the reply ended)
  local last="" same=0
  for i in $(seq 1 150); do sleep 0.2; [ "$(ndone)" != "$1" ] && break; done
  for i in $(seq 1 1200); do sleep 0.5; cur=$(ndone); if [ "$cur" = "$last" ]; then same=$((same+1)); else same=0; last=$cur; fi; [ $same -ge 6 ] && break; done
}
since() { python3 -c "import time;print(round(time.time()-$1,2))"; }
for t in $(seq 1 "$F2S"); do
  "${T[@]}" send-keys -t e2 F2; t0=$(date +%s.%N); lat=timeout; end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do "${T[@]}" capture-pane -p -t e2 | grep -q "System prompt" && { lat=$(since "$t0"); break; }; sleep 0.03; done
  echo "F2 $t: $lat s  load: $(cut -d' ' -f1 /proc/loadavg)"
  "${T[@]}" send-keys -t e2 Escape
  end=$((SECONDS + 60)); while [ $SECONDS -lt $end ]; do "${T[@]}" capture-pane -p -t e2 | grep -q "System prompt" || break; sleep 0.05; done
  sleep 1
done
msgs=("Write a long story about a brave knight." "Write another long story about a dragon." "Write a long essay about the history of Rome.")
for msg in "${msgs[@]:0:$CHAT}"; do
  before=$(ndone); "${T[@]}" send-keys -t e2 "$msg" Enter; idle "$before"
done
echo "chat: $(ndone)  burners: $BURN  load: $(cut -d' ' -f1-3 /proc/loadavg)"
shown() { "${T[@]}" capture-pane -p -t e2 | grep -oE "steps +[0-9]+ \([0-9]+ tokens\)" | head -1 | grep -oE "[0-9]+ tokens" | cut -d' ' -f1; }
for t in $(seq 1 "$N"); do
  before=$(ndone)
  "${T[@]}" send-keys -t e2 C-r
  end=$((SECONDS + 60))  # the regenerated reply has begun (a starved UI may take a while to say so)
  while [ $SECONDS -lt $end ]; do "${T[@]}" capture-pane -p -t e2 | grep -q "generating…" && break; sleep 0.1; done
  sleep "$D"
  at=$(shown)
  "${T[@]}" send-keys -t e2 Escape; t0=$(date +%s.%N)
  lat=timeout; end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do
    screen=$("${T[@]}" capture-pane -p -t e2)
    if grep -qE "cancelled · [0-9]+ tok" <<<"$screen" && ! grep -q "generating…" <<<"$screen"; then lat=$(since "$t0"); break; fi
    sleep 0.03
  done
  tok=$("${T[@]}" capture-pane -p -t e2 | grep -oE "(cancelled|max_tokens|eos) · [0-9]+ tok" | tail -1)
  echo "try $t: Esc ${D}s after the reply began -> $lat s  (${at:-?} tokens shown at Esc; $tok)  load: $(cut -d' ' -f1 /proc/loadavg)"
  idle "$before"
done
"${T[@]}" kill-server
rm -rf "$X"
