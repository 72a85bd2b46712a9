package weir.bench;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;

import scala.Tuple2;

/**
 * The keyed-average workload as a Java flatMapGroupsWithState: per key a value state
 * (count, sum); on each event count += 1, sum += value; when count == W emit (key, sum / count)
 * and clear the state. This is what a Java/Scala Spark user writes: Spark's JVM path, the
 * reference the Python peers are compared with.
 */
public final class KeyedAverage {
    private KeyedAverage() {}

    /** The per-key function; W is the window size. */
    static final class Update
            implements FlatMapGroupsWithStateFunction<Long, Row, Tuple2<Long, Long>, Tuple2<Long, Long>> {
        private static final long serialVersionUID = 1L;
        private final long window;

        Update(long window) {
            this.window = window;
        }

        @Override
        public Iterator<Tuple2<Long, Long>> call(Long key, Iterator<Row> events, GroupState<Tuple2<Long, Long>> state) {
            long count = 0;
            long sum = 0;
            if (state.exists()) {
                count = state.get()._1();
                sum = state.get()._2();
            }
            List<Tuple2<Long, Long>> out = new ArrayList<>();
            while (events.hasNext()) {
                Row event = events.next();
                count += 1;
                sum += event.getLong(1);
                if (count == window) {
                    // Non-negative operands: Java's truncating division equals floor division.
                    out.add(new Tuple2<>(key, sum / count));
                    count = 0;
                    sum = 0;
                }
            }
            if (count == 0) {
                state.remove();
            } else {
                state.update(new Tuple2<>(count, sum));
            }
            return out.iterator();
        }
    }

    /**
     * Applies the workload to a streaming DataFrame of (key long, value long) and returns
     * a DataFrame of (key long, avg long) in append mode. Called from Python through py4j.
     */
    public static Dataset<Row> apply(Dataset<Row> events, long window) {
        return events
                .groupByKey((MapFunction<Row, Long>) row -> row.getLong(0), Encoders.LONG())
                .flatMapGroupsWithState(
                        new Update(window),
                        OutputMode.Append(),
                        Encoders.tuple(Encoders.LONG(), Encoders.LONG()),
                        Encoders.tuple(Encoders.LONG(), Encoders.LONG()),
                        GroupStateTimeout.NoTimeout())
                .toDF("key", "avg");
    }
}
