from lemonade_onebit.cli import main

raise SystemExit(main())
