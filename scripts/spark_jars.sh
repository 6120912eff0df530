#!/usr/bin/env bash
# The jars `hookbridge report` hands to Spark (`spark.jars`), fetched once into .spark-jars/:
# the Spark Cassandra Connector and the MongoDB Spark connector with their runtime dependencies,
# from Maven Central (`mvn dependency:copy-dependencies` on scripts/spark-jars/pom.xml, which says
# which versions and why), and the JDBC drivers of PostgreSQL and MariaDB / MySQL from Debian's
# libpostgresql-jdbc-java and libmariadb-java.
# Spark then never downloads anything at run time (no Ivy, no --packages).
# A second run sees the stamp (newer than the pom) and does nothing. SPARK_JARS_DIR overrides the folder.
. "$(dirname "$0")/lib.sh"
JARS_DIR="${SPARK_JARS_DIR:-$ROOT/.spark-jars}"
POM="$ROOT/scripts/spark-jars/pom.xml"
STAMP="$JARS_DIR/.complete"
if [ -f "$STAMP" ] && [ "$STAMP" -nt "$POM" ] && [ -f "$JARS_DIR/postgresql.jar" ] && [ -f "$JARS_DIR/mariadb-java-client.jar" ]; then
  exit 0
fi
command -v mvn >/dev/null || apt_install maven
apt_install libpostgresql-jdbc-java libmariadb-java
say "fetching the Spark connector jars from Maven Central into $JARS_DIR"
mkdir -p "$JARS_DIR"
rm -f "$JARS_DIR"/*.jar
# Spark, Scala and the libraries PySpark already ships (newer there) stay out: two versions of one
# class on the classpath fail at run time.
mvn -q -B -f "$POM" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$JARS_DIR" \
  -DexcludeGroupIds=org.scala-lang,org.apache.spark,org.slf4j \
  -DexcludeArtifactIds=commons-lang3,metrics-core,paranamer
# Debian's unversioned name points at the packaged driver; a copy makes the folder all Spark needs.
cp -L /usr/share/java/postgresql.jar "$JARS_DIR/postgresql.jar"
cp -L /usr/share/java/mariadb-java-client.jar "$JARS_DIR/mariadb-java-client.jar"
touch "$STAMP"
say "Spark jars ready in $JARS_DIR ($(ls "$JARS_DIR"/*.jar | wc -l) jars)"
