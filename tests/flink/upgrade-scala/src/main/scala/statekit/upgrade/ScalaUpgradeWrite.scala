package statekit.upgrade

import java.nio.file.{Files, Path, Paths, StandardCopyOption}
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

import org.apache.flink.api.common.state.{ValueState, ValueStateDescriptor}
import org.apache.flink.configuration.Configuration
import org.apache.flink.core.execution.SavepointFormatType
import org.apache.flink.streaming.api.functions.KeyedProcessFunction
import org.apache.flink.streaming.api.functions.sink.DiscardingSink
import org.apache.flink.streaming.api.functions.source.SourceFunction
import org.apache.flink.streaming.api.scala._
import org.apache.flink.util.Collector

/** A sensor reading as the 1.x Scala API job keeps it: a case class with an Option field (CaseClassSerializer). */
case class Reading(sensor: String, value: Double, count: Long, unit: Option[String], level: Int)

/**
 * The Flink 1.20 Scala API side of the upgrade pairs: ValueState[Reading] "reading" and ValueState[Option[Long]]
 * "last" in operator "readings", keyed by "user-i"; takes a canonical savepoint to OUT/savepoint and writes
 * OUT/expected.json in UpgradeWrite's layout. Args: OUT_DIR [hashmap|rocksdb].
 */
object ScalaUpgradeWrite {
  val NKeys = 60
  val Done = new AtomicInteger()

  def key(i: Int): String = s"user-$i"
  def reading(i: Int): Reading =
    Reading(s"sensor-${i % 7}", i * 0.25 - 3, i.toLong * 1000000007L, if (i % 3 == 0) None else Some(if (i == 4) "°C" else "kWh"), i % 5)
  def last(i: Int): Option[Long] = if (i % 4 == 0) None else Some(i.toLong * 11)

  class Keys extends SourceFunction[Int] {
    @volatile private var running = true
    override def run(ctx: SourceFunction.SourceContext[Int]): Unit = {
      for (i <- 0 until NKeys) ctx.getCheckpointLock.synchronized { ctx.collect(i) }
      while (running) Thread.sleep(20)
    }
    override def cancel(): Unit = running = false
  }

  class SetAll extends KeyedProcessFunction[String, Int, Int] {
    @transient private var readingState: ValueState[Reading] = _
    @transient private var lastState: ValueState[Option[Long]] = _
    override def open(parameters: Configuration): Unit = {
      readingState = getRuntimeContext.getState(new ValueStateDescriptor[Reading]("reading", createTypeInformation[Reading]))
      lastState = getRuntimeContext.getState(new ValueStateDescriptor[Option[Long]]("last", createTypeInformation[Option[Long]]))
    }
    override def processElement(i: Int, ctx: KeyedProcessFunction[String, Int, Int]#Context, out: Collector[Int]): Unit = {
      readingState.update(reading(i))
      lastState.update(last(i))
      Done.incrementAndGet()
      out.collect(i)
    }
  }

  private def q(s: String): String = "\"" + s.flatMap {
    case '"' => "\\\""
    case '\\' => "\\\\"
    case c if c < ' ' || c > '~' => f"\\u${c.toInt}%04x"
    case c => c.toString
  } + "\""

  private def readingJson(r: Reading): String =
    s"""{"count": ${r.count}, "level": ${r.level}, "sensor": ${q(r.sensor)}, "unit": ${r.unit.map(q).getOrElse("null")}, "value": ${r.value}}"""

  private def copyTree(src: Path, dst: Path): Unit = {
    Files.walk(src).forEach { x =>
      val t = dst.resolve(src.relativize(x).toString)
      if (Files.isDirectory(x)) Files.createDirectories(t) else Files.copy(x, t, StandardCopyOption.REPLACE_EXISTING)
    }
  }

  def main(args: Array[String]): Unit = {
    val out = Paths.get(args(0)).toAbsolutePath
    val backend = if (args.length > 1) args(1) else "hashmap"
    val conf = new Configuration()
    conf.setString("state.backend.type", backend)
    conf.setString("rest.bind-address", "127.0.0.1")
    conf.setString("rest.address", "127.0.0.1")
    conf.setString("rest.bind-port", "0")
    val work = Files.createTempDirectory("statekit-upgrade-scala-")
    conf.setString("state.checkpoints.dir", work.resolve("chk").toUri.toString)
    val env = StreamExecutionEnvironment.createLocalEnvironment(2, conf)
    env.setMaxParallelism(128)
    env.addSource(new Keys).setParallelism(1).uid("src")
      .keyBy(i => key(i)).process(new SetAll).uid("readings").name("readings")
      .addSink(new DiscardingSink[Int]).uid("sink")
    val client = env.executeAsync("statekit-upgrade-scala")
    val deadline = System.currentTimeMillis() + 180000
    while (Done.get() < NKeys) {
      if (System.currentTimeMillis() > deadline) throw new IllegalStateException("job did not process input in time")
      Thread.sleep(50)
    }
    val sp = client.triggerSavepoint(work.resolve("sp").toUri.toString, SavepointFormatType.CANONICAL).get(120, TimeUnit.SECONDS)
    client.cancel().get(60, TimeUnit.SECONDS)
    val dest = out.resolve("savepoint")
    Files.createDirectories(out)
    copyTree(Paths.get(new java.net.URI(sp)), dest)
    val keys = (0 until NKeys).map { i =>
      s"""    ${q(key(i))}: {"last": ${last(i).map(_.toString).getOrElse("null")}, "reading": ${readingJson(reading(i))}}"""
    }
    val json =
      s"""{
  "flink_version": ${q(org.apache.flink.runtime.util.EnvironmentInformation.getVersion)},
  "generator": "statekit.upgrade.ScalaUpgradeWrite (tests/flink/upgrade-scala)",
  "state_backend": ${q(backend)},
  "type_info": {"readings/reading": ${q(createTypeInformation[Reading].toString)}, "readings/last": ${q(createTypeInformation[Option[Long]].toString)}},
  "operators": {"readings": {
${keys.mkString(",\n")}
  }}
}
"""
    Files.write(out.resolve("expected.json"), json.getBytes("UTF-8"))
    println(s"wrote $dest")
    System.exit(0)
  }
}
