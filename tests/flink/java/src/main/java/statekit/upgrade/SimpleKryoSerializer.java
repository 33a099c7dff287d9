package statekit.upgrade;

import com.esotericsoftware.kryo.Kryo;
import com.esotericsoftware.kryo.Serializer;
import com.esotericsoftware.kryo.io.Input;
import com.esotericsoftware.kryo.io.Output;

/** A user's own Kryo serializer for {@link UpgradeModel.Simple} (its own byte layout): what statekit cannot migrate. */
public class SimpleKryoSerializer extends Serializer<UpgradeModel.Simple> implements java.io.Serializable {
    @Override
    public void write(Kryo kryo, Output output, UpgradeModel.Simple s) {
        output.writeString(UpgradeModel.json(s).toString());
    }

    @Override
    @SuppressWarnings({"rawtypes"})
    public UpgradeModel.Simple read(Kryo kryo, Input input, Class type) {
        String json = input.readString();
        try {
            org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode n = UpgradeModel.M.readTree(json);
            return new UpgradeModel.Simple(n.get("n").asInt(), n.get("s").asText());
        } catch (java.io.IOException e) {
            throw new IllegalStateException(e);
        }
    }
}
