#!/usr/bin/env bash
# Stands in for Kafka's kafka-topics.sh in client test suites: the --create, --alter (--partitions) and
# --delete forms they use, done by `backbone topics`. $BACKBONE_PYTHON is the Python with backbone installed.
set -euo pipefail
action="" topic="" bootstrap="" extra=()
while (($#)); do
  case "$1" in
    --bootstrap-server) bootstrap="$2"; shift 2 ;;
    --create | --alter | --delete) action="${1#--}"; shift ;;
    --topic) topic="$2"; shift 2 ;;
    --partitions | --replication-factor | --config) extra+=("$1" "$2"); shift 2 ;;
    *) echo "kafka-topics.sh (Backbone stand-in): unsupported argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$action" || -z "$topic" || -z "$bootstrap" ]]; then
  echo "kafka-topics.sh (Backbone stand-in): needs --bootstrap-server, --topic and one of" \
    "--create, --alter, --delete" >&2
  exit 2
fi
exec "${BACKBONE_PYTHON:-python3}" -m backbone topics "$action" "$topic" --bootstrap-server "$bootstrap" \
  "${extra[@]}"
