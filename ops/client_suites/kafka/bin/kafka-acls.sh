#!/usr/bin/env bash
# Stands in for Kafka's kafka-acls.sh in client test suites: --add, --remove and --list, done by
# `backbone acls`. It writes the cluster's ZooKeeper as Kafka's does with --authorizer-properties
# zookeeper.connect=...: $BACKBONE_ZOOKEEPER names it (--bootstrap-server is accepted and not needed).
# $BACKBONE_PYTHON is the Python with backbone installed.
set -euo pipefail
action="" args=()
while (($#)); do
  case "$1" in
    --bootstrap-server) shift 2 ;;
    --add | --remove | --list) action="${1#--}"; shift ;;
    --force) shift ;; # Kafka's asks before removing without it; ours never asks
    --cluster) args+=("$1"); shift ;;
    --resource-pattern-type) args+=("$1" "${2,,}"); shift 2 ;; # Kafka takes LITERAL or literal
    --topic | --group | --transactional-id | --operation | --allow-principal | --deny-principal | \
      --allow-host | --deny-host)
      args+=("$1" "$2"); shift 2 ;;
    *) echo "kafka-acls.sh (Backbone stand-in): unsupported argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$action" || -z "${BACKBONE_ZOOKEEPER:-}" ]]; then
  echo "kafka-acls.sh (Backbone stand-in): needs one of --add, --remove, --list, and \$BACKBONE_ZOOKEEPER" \
    "(the cluster's zookeeper.connect)" >&2
  exit 2
fi
exec "${BACKBONE_PYTHON:-python3}" -m backbone acls "$action" "${args[@]}"
