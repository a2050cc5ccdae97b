cd /work/main
for v in old new; do
  cp /tmp/${v}_node.py wamdiff2_ros/node/planner_node.py
  timeout 400 .venv/bin/wamdiff2 bench soak --minutes 2 --rate 15 > /tmp/ab_${v}_3.txt 2>&1
done
cp /tmp/new_node.py wamdiff2_ros/node/planner_node.py
echo done > /tmp/ab_done2
