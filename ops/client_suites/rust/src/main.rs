//! rskafka against a Backbone cluster: create a topic, produce with every codec, consume, list offsets
//! (earliest, latest, by timestamp), delete records, delete the topic. Each step prints one line
//! `step key=value ...` that the caller checks, and any answer other than the expected one ends the
//! program with an error.
//!
//! Usage: backbone-rust-conformance BOOTSTRAP TOPIC

use std::collections::BTreeMap;
use std::time::Duration;

use rskafka::chrono::{TimeZone, Utc};
use rskafka::client::error::{Error, ProtocolError};
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::{Record, RecordAndOffset};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PARTITIONS: i32 = 3;
const REPLICATION_FACTOR: i16 = 3;
const RECORDS_PER_CODEC: usize = 4;
const TIMEOUT_MS: i32 = 10_000;
// Record timestamps: a fixed base plus the record's index in ms, so that offsets by time are known.
const BASE_TIMESTAMP_MS: i64 = 1_700_000_000_000;

fn record(index: usize) -> Record {
    Record {
        key: Some(format!("key-{index}").into_bytes()),
        value: Some(format!("value-{index}").into_bytes()),
        headers: BTreeMap::from([("index".to_owned(), index.to_string().into_bytes())]),
        timestamp: Utc.timestamp_millis_opt(BASE_TIMESTAMP_MS + index as i64).unwrap(),
    }
}

fn check(condition: bool, what: String) -> Result<()> {
    if condition {
        Ok(())
    } else {
        Err(what.into())
    }
}

/// Every record from `offset` up to `end`, fetched in as many requests as it takes (at most 50).
async fn fetch_all(partition: &PartitionClient, mut offset: i64, end: i64) -> Result<Vec<RecordAndOffset>> {
    let mut records = Vec::new();
    for _ in 0..50 {
        if offset >= end {
            return Ok(records);
        }
        let (batch, _high_watermark) = partition.fetch_records(offset, 1..1_000_000, 1_000).await?;
        if let Some(last) = batch.last() {
            offset = last.offset + 1;
        }
        records.extend(batch.into_iter().filter(|r| r.offset < end));
    }
    Err(format!("fetched only up to offset {offset} of {end} in 50 requests").into())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, bootstrap, topic] = args.as_slice() else {
        return Err("usage: backbone-rust-conformance BOOTSTRAP TOPIC".into());
    };
    let brokers = bootstrap.split(',').map(str::to_owned).collect();
    let client = ClientBuilder::new(brokers).build().await?;

    let controller = client.controller_client()?;
    controller.create_topic(topic.as_str(), PARTITIONS, REPLICATION_FACTOR, TIMEOUT_MS).await?;
    println!("created topic={topic} partitions={PARTITIONS} replication_factor={REPLICATION_FACTOR}");

    let listed = client.list_topics().await?;
    let found = listed.iter().find(|t| &t.name == topic).ok_or("the new topic is not listed")?;
    println!("listed topic={} partitions={}", found.name, found.partitions.len());

    let partition = client.partition_client(topic.as_str(), 1, UnknownTopicHandling::Retry).await?;
    let codecs = [
        ("none", Compression::NoCompression),
        ("gzip", Compression::Gzip),
        ("lz4", Compression::Lz4),
        ("snappy", Compression::Snappy),
        ("zstd", Compression::Zstd),
    ];
    let mut index = 0;
    for (name, codec) in codecs {
        let records = (index..index + RECORDS_PER_CODEC).map(record).collect();
        let offsets = partition.produce(records, codec).await?;
        println!("produced codec={name} offsets={}..{}", offsets[0], offsets[offsets.len() - 1]);
        index += RECORDS_PER_CODEC;
    }
    let total = index as i64;

    let records = fetch_all(&partition, 0, total).await?;
    for (expected, got) in records.iter().enumerate() {
        check(got.offset == expected as i64, format!("offset {} where {expected} was due", got.offset))?;
        let want = record(expected);
        check(got.record.key == want.key, format!("key at offset {expected}: {:?}", got.record.key))?;
        check(got.record.value == want.value, format!("value at offset {expected}"))?;
        check(got.record.headers == want.headers, format!("headers at offset {expected}"))?;
        check(got.record.timestamp == want.timestamp, format!("timestamp at offset {expected}"))?;
    }
    check(records.len() as i64 == total, format!("consumed {} of {total}", records.len()))?;
    println!("consumed records={} verified=key,value,headers,timestamp", records.len());

    let earliest = partition.get_offset(OffsetAt::Earliest).await?;
    let latest = partition.get_offset(OffsetAt::Latest).await?;
    let middle = Utc.timestamp_millis_opt(BASE_TIMESTAMP_MS + 10).unwrap();
    let by_time = partition.get_offset(OffsetAt::Timestamp(middle)).await?;
    println!("offsets earliest={earliest} latest={latest} at_timestamp_of_10={by_time}");

    partition.delete_records(5, TIMEOUT_MS).await?;
    let earliest = partition.get_offset(OffsetAt::Earliest).await?;
    let refused = match partition.fetch_records(0, 1..1_000_000, 100).await {
        Err(Error::ServerError { protocol_error: ProtocolError::OffsetOutOfRange, .. }) => true,
        Err(other) => return Err(other.into()),
        Ok(_) => false,
    };
    let rest = fetch_all(&partition, earliest, total).await?;
    println!(
        "deleted before=5 earliest={earliest} fetch_below_refused={refused} remaining={}",
        rest.len()
    );

    controller.delete_topic(topic.as_str(), TIMEOUT_MS).await?;
    for _ in 0..50 {
        if !client.list_topics().await?.iter().any(|t| &t.name == topic) {
            println!("deleted topic={topic}");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the deleted topic is still listed after 5 s".into())
}
