"""statekit.runtime: an embedded stream processor with Flink's state model and PyFlink's DataStream API."""

from statekit.runtime.checkpointing import latest_checkpoint
from statekit.runtime.clock import ManualClock, SystemClock
from statekit.runtime.config import (
    CheckpointConfig,
    CheckpointingMode,
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    RestartStrategies,
    RestartStrategy,
)
from statekit.runtime.context import (
    FunctionInitializationContext,
    FunctionSnapshotContext,
    ProcessContext,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from statekit.runtime.datastream import CollectResult, ConnectedStreams, DataStream, DataStreamSink, KeyedStream
from statekit.runtime.environment import StreamExecutionEnvironment
from statekit.runtime.functions import (
    CheckpointedFunction,
    CheckpointListener,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    ListCheckpointed,
    MapFunction,
    ProcessFunction,
    RichFunction,
    SinkFunction,
    SourceFunction,
)
from statekit.runtime.job import JobClient, JobExecutionResult
from statekit.runtime.sinks import Encoder, FileSink, read_file_sink
from statekit.runtime.sources import FileSource, SourceContext
from statekit.runtime.watermarks import MAX_WATERMARK, MIN_WATERMARK, TimestampAssigner, WatermarkStrategy

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "CheckpointConfig",
    "CheckpointListener",
    "CheckpointedFunction",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "CollectResult",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "EmbeddedRocksDBStateBackend",
    "Encoder",
    "FileSink",
    "FileSource",
    "FilterFunction",
    "FlatMapFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "HashMapStateBackend",
    "JobClient",
    "JobExecutionResult",
    "KeySelector",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListCheckpointed",
    "ManualClock",
    "MapFunction",
    "ProcessContext",
    "ProcessFunction",
    "RestartStrategies",
    "RestartStrategy",
    "RichFunction",
    "RuntimeContext",
    "SinkFunction",
    "SourceContext",
    "SourceFunction",
    "StreamExecutionEnvironment",
    "SystemClock",
    "TimeDomain",
    "TimerService",
    "TimestampAssigner",
    "WatermarkStrategy",
    "latest_checkpoint",
    "read_file_sink",
]
