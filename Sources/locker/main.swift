print("locker")
