cd /work/main
for i in 1 2; do
 for v in new old; do
  cp /tmp/${v}_node.py wamdiff2_ros/node/planner_node.py
  timeout 400 .venv/bin/wamdiff2 bench soak --minutes 2 --rate 15 > /tmp/ab_${v}_$i.txt 2>&1
 done
done
cp /tmp/new_node.py wamdiff2_ros/node/planner_node.py
echo done > /tmp/ab_done
