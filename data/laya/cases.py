"""Hand-written requests for the Laya classes, with the phrasings that make them hard.

`code`: the answer is source code, a command, a config, or an explanation of code.
`prose`: the answer is several paragraphs of natural language (including questions *about*
software that want an essay, not code). `short`: the answer is a word, a number or one sentence
(greetings, translations, arithmetic, facts). `long_doc` is decided by length alone (>= 1,024
characters) and is built by `build.py` from long pasted material.
"""

CODE = """
Write a Rust function that sums a slice.
Write a Python function that parses an ISO-8601 timestamp without using datetime, with tests.
How do I reverse a list in Python?
Give me a bash one-liner to find the 10 largest files under /var.
Write a SQL query that returns the top 5 customers by total order value.
Implement binary search in Go.
Write a JavaScript debounce function.
Create a Dockerfile for a Flask app running on gunicorn.
Write an nginx config that proxies /api to localhost:8080.
Write a docker-compose.yml with postgres and redis.
How do I undo the last git commit but keep the changes?
What's the command to list open ports on Linux?
Write a regex that matches an IPv4 address.
Explain what this code does: for i in range(len(xs)): xs[i] = xs[i] ** 2
Fix the bug in this function: def add(a, b): return a - b
Why does this throw a NullPointerException? String s = null; s.length();
Convert this Python loop to a list comprehension: out = []\\nfor x in xs:\\n    if x > 0:\\n        out.append(x * 2)
Write a C function to reverse a string in place.
Write a unit test in pytest for a function is_prime(n).
Show me how to read a CSV file with pandas and compute the mean of a column.
Write a TypeScript interface for a user with id, name and optional email.
Write a Kubernetes deployment yaml for an nginx container with 3 replicas.
Give me a systemd unit file that runs /usr/local/bin/app at boot.
How do I make an HTTP POST request with curl sending JSON?
Write a Makefile with build, test and clean targets for a C project.
Write a React component that shows a counter with + and - buttons.
Implement quicksort in Haskell.
Write a function in Java that checks if a string is a palindrome.
Write a Python script that renames all .jpeg files in a folder to .jpg.
How do I center a div with CSS flexbox?
Write a GitHub Actions workflow that runs pytest on every push.
Write a PowerShell command to list running services.
Write a SQL migration that adds a non-null column with a default.
Write a Lua function that deep-copies a table.
Write a shell script that backs up /etc to a tar.gz with today's date.
Write a C++ class for a thread-safe queue.
What does `git rebase -i HEAD~3` do?
Explain this regex: ^(?=.*[A-Z])(?=.*\\d).{8,}$
What does the `static` keyword mean in this C code? static int counter = 0;
Translate this Python to JavaScript: print([x*x for x in range(10)])
Write an awk command that sums the third column of a file.
How to install numpy with pip for Python 3.11 only?
Write a Terraform resource for an S3 bucket with versioning enabled.
Refactor this to use async/await: fetch(url).then(r => r.json()).then(d => console.log(d))
Write a Python class implementing an LRU cache.
Write a function to compute Fibonacci numbers with memoization.
sql to delete duplicate rows keeping the lowest id
python: merge two dicts
bash loop over files in a directory
js sort array of objects by date
Implement a trie in Python with insert and search.
Write an Ansible task that installs nginx and starts it.
Write a .gitignore for a Node project.
Give me the ffmpeg command to convert mp4 to gif at 10 fps.
Write a Swift function that formats a Date as yyyy-MM-dd.
Write a Kotlin data class for a Book with title, author and year.
Write a Go HTTP server that answers "ok" on /health.
How can I profile a slow Python function? Show code.
Write a Prometheus alert rule for high CPU usage.
Write an Excel formula that counts cells greater than 100 in A1:A50.
Write a jq filter that extracts all names from a JSON array of objects.
Write a cron line that runs backup.sh every day at 2am.
Create a Python dataclass for a point with x and y and a distance method.
Write a function in Rust that reads a file line by line.
How do I catch multiple exceptions in one line in Python?
Write a minimal Express.js server with one GET route.
Write a PHP function that validates an email address.
Write a bash script that retries a command up to 5 times.
Write a Python generator that yields chunks of a list of size n.
Write the SQL to create a table for blog posts with comments.
Show the code to connect to PostgreSQL from Python using psycopg.
Write a vim command to replace foo with bar in the whole file.
What is wrong with this code?\\n```js\\nconst x = [1,2,3]\\nx = x.map(n => n * 2)\\n```
Add type hints to this function: def greet(name, times): return [name] * times
Write a test for this Go function: func Add(a, b int) int { return a + b }
Implement the FizzBuzz problem in C#.
Write an R script that plots a histogram of a numeric vector.
Write MATLAB code to solve a linear system Ax = b.
Write a Solidity contract with a simple counter.
Write a Python decorator that times a function.
Write code to flatten a nested list in Python.
Convert this JSON to a Python dataclass: {"id": 1, "name": "x", "tags": ["a"]}
Escribe una función en Python que cuente las vocales de una cadena.
Écris une fonction JavaScript qui renvoie le maximum d'un tableau.
Schreibe eine Python-Funktion, die prüft, ob eine Zahl gerade ist.
Scrivi una query SQL che conta gli ordini per cliente.
Escreva um script bash que mostra o uso de disco.
用Python写一个函数，计算列表的平均值。
Pythonでフィボナッチ数列を返す関数を書いてください。
Write a one-line Python expression that checks whether a string is all digits.
Give me a snippet to generate a UUID in Node.js.
Which git command shows the diff of staged changes?
What's the pip command to list outdated packages?
Write a function that returns the nth prime number.
Write a binary tree inorder traversal without recursion in Python.
Implement Dijkstra's algorithm in Python using heapq.
Write a Python function to validate a Sudoku board.
How do I set an environment variable permanently in bash?
Write a Flask endpoint that accepts a file upload.
Write a GraphQL schema for a todo list.
How do I write a for loop in Rust over a range?
Make this function tail-recursive: def fact(n): return 1 if n == 0 else n * fact(n-1)
Write a Python script to download a web page and count the words.
Write a chmod command to make a script executable by its owner only.
Write the regex to match dates like 2024-05-31.
Show how to use std::unique_ptr with a custom deleter.
Write a Python function that converts Celsius to Fahrenheit.
Write a function that checks whether two strings are anagrams.
Explain line by line what this bash does: set -euo pipefail; trap 'rm -f $tmp' EXIT
Write a Dockerfile multi-stage build for a Go binary.
Write a YAML config for pre-commit with black and ruff.
Write a pandas snippet to group by country and sum sales.
What does this SQL do? SELECT a.id FROM a LEFT JOIN b ON a.id = b.a_id WHERE b.id IS NULL
""".strip().split("\n")

PROSE = """
Explain how a B-tree insert works, step by step.
Write an essay about the causes of the First World War.
Describe the water cycle for a middle school class.
What are the pros and cons of microservices compared to a monolith?
Why do many developers prefer Rust over C++ for new systems projects?
Explain the difference between TCP and UDP and when to use each.
Write a short story about a lighthouse keeper who finds a message in a bottle.
Describe the history of the Roman Empire's decline.
How does the immune system fight a viral infection?
Explain how compound interest works and why it matters for retirement saving.
Write a cover letter for a junior data analyst position.
What are the main ideas of Stoic philosophy?
Compare electric cars and hybrid cars for a family that drives 50 km a day.
Explain how public-key cryptography works to a non-technical reader.
Write a blog post about the benefits of remote work.
What should I consider when choosing between PostgreSQL and MongoDB for a new product?
Describe how photosynthesis works.
Explain the theory of evolution by natural selection.
Write a product description for a handmade ceramic mug.
Give me an overview of the French Revolution.
How does a transformer neural network process a sentence?
Why is the sky blue? Explain in detail.
Explain what technical debt is and how teams can manage it.
Write a speech for a best man at a wedding.
Describe the main differences between capitalism and socialism.
Explain how vaccines are developed and tested.
What is the role of the central bank in an economy?
Write a letter to my landlord asking to fix the heating.
Explain the plot of Hamlet and its main themes.
How does garbage collection work in Java, conceptually?
Explain why code reviews matter and how to do them well.
Discuss the ethical issues of self-driving cars.
Explain how the internet routes a packet from my laptop to a server abroad.
Write a travel guide paragraph about Lisbon for first-time visitors.
What are the health benefits and risks of intermittent fasting?
Explain the difference between machine learning and traditional programming.
Describe the architecture of a typical web application in plain words.
How did the printing press change Europe?
Summarize the arguments for and against nuclear power.
Explain how climate change affects ocean currents.
Write a motivational message for a team after a failed product launch.
Explain object-oriented programming concepts without code.
What is the CAP theorem and what does it mean in practice?
Describe the life cycle of a star.
Explain how a bill becomes a law in the United States.
Write a review of a fictional Italian restaurant.
How should a beginner start learning to play the guitar?
Explain the causes and effects of inflation.
Write a eulogy for a beloved grandmother who loved gardening.
Explain the main differences between Python 2 and Python 3 and why the migration took so long.
Why is functional programming becoming popular? Discuss.
What are the advantages of test-driven development? Explain with reasoning.
Explain how Git works internally, conceptually, without commands.
Describe the plot and themes of Pride and Prejudice.
Explain the difference between weather and climate.
Give me advice on preparing for a job interview at a tech company.
Explain how a car engine works.
Describe the role of mitochondria in a cell.
Write a persuasive essay on why cities should invest in bike lanes.
Explain the Monty Hall problem and why the answer surprises people.
Explain what Kubernetes is for and why companies adopt it.
How do recommendation systems decide what to show me?
What makes a good API design? Discuss principles.
Explain the history of the Unix operating system.
Describe how the stock market works for a teenager.
Write an introduction for a thesis on urban heat islands.
Explain the difference between a virus and a bacterium.
How do noise-cancelling headphones work?
Explain the importance of sleep for memory.
Write a newsletter paragraph announcing our new office opening.
Describe the Renaissance and its impact on art.
Explain agile methodology and its criticisms.
What are the trade-offs of using an ORM versus raw SQL? Explain.
Explain how databases use indexes to speed up queries, conceptually.
Explica las causas de la Revolución Mexicana.
Explique le fonctionnement de la photosynthèse en détail.
Erkläre, wie das deutsche Wahlsystem funktioniert.
Spiega la differenza tra il Rinascimento e il Barocco.
Explique como funciona o sistema imunológico.
请解释一下全球变暖的原因和影响。
日本の四季について説明してください。
Tell me about the history of coffee.
Tell me about black holes.
Can you explain how blockchains reach consensus?
I'm new to investing. Walk me through index funds and why people recommend them.
Help me write a polite email declining a meeting invitation.
Write a poem about autumn in the city.
Write a bedtime story about a dragon who is afraid of the dark.
Compose a LinkedIn post celebrating five years at my company.
Outline and explain the stages of grief.
Explain the main causes of the 2008 financial crisis.
Describe a day in the life of a medieval farmer.
Why do programming languages have different type systems? Explain the trade-offs.
Explain how memory leaks happen in general terms and how teams prevent them.
What is the difference between concurrency and parallelism? Explain with analogies.
Write a paragraph for a school report about volcanoes.
Explain the significance of the Magna Carta.
Discuss the impact of social media on teenagers' mental health.
How does GPS determine my location?
Explain quantum entanglement to a curious high school student.
Write a product launch announcement for a budgeting app.
Give me a detailed comparison of Linux distributions for a beginner.
""".strip().split("\n")

SHORT = """
What is the capital of France?
hi
Hello!
Good morning
Thanks!
thank you so much
What is 2 + 2?
What's 15% of 80?
How many days are in a leap year?
Translate to French: The quick brown fox jumps over the lazy dog, and then it goes home to sleep.
Translate "good night" to Spanish.
How do you say thank you in Japanese?
Who wrote Hamlet?
What year did World War II end?
What is the boiling point of water in Fahrenheit?
Is a tomato a fruit?
Spell 'necessary'.
What's the square root of 144?
What is 17 times 23?
Define 'ephemeral' in one sentence.
Give me a synonym for happy.
What's the opposite of generous?
What time zone is Tokyo in?
How many continents are there?
Who painted the Mona Lisa?
What is the chemical symbol for gold?
Yes or no: is the Earth flat?
What's the largest planet in our solar system?
Convert 10 miles to kilometers.
What is the plural of mouse?
Name a primary color.
What does CPU stand for?
What does HTTP stand for?
Which language is spoken in Brazil?
How tall is Mount Everest?
Who is the author of 1984?
What is the freezing point of water in Celsius?
Round 3.14159 to two decimals.
What's 100 divided by 8?
Is 97 a prime number?
What day comes after Tuesday?
How many legs does a spider have?
What's the currency of Japan?
Capital of Australia?
2^10 = ?
12 * 12
sqrt(81)
Translate to German: I love coffee.
Traduis en anglais : Je suis fatigué.
¿Cuál es la capital de Italia?
Quelle est la capitale du Canada ?
Wie spät ist es in London, wenn es in Berlin 12 Uhr ist?
Quanto fa 7 per 8?
Qual é a capital de Portugal?
日本の首都はどこですか？
中国的首都是哪里？
Say hello in Italian.
What's the past tense of 'run'?
Give me one word that rhymes with cat.
What is the speed of light?
Who was the first person on the Moon?
What is the main ingredient of guacamole?
Which is bigger, 0.5 or 0.45?
How many minutes are in 3 hours?
What's the answer to 45 - 19?
Is Python case sensitive?
What is the default port for HTTPS?
What does RAM stand for?
Which company makes the iPhone?
What's the file extension for Python files?
Is JSON a programming language?
What year was Linux first released?
Who created the C programming language?
What does 'git' stand for?
How many bits are in a byte?
What is the latest stable version of Python you know of?
hey there
how are you?
good night!
bye
ok
cool, thanks
lol
Can you help me?
Are you a robot?
What's your name?
Tell me a joke.
Give me a random number between 1 and 10.
Flip a coin.
What's the weather like on Mars, in one sentence?
Summarize the theory of relativity in one sentence.
In one word, what is the color of the sky?
Answer with a number: how many sides does a hexagon have?
Finish the sentence: an apple a day...
What's the abbreviation for kilogram?
Correct the spelling: recieve
Is 'their' or 'there' correct in: ___ car is red?
Translate 'cat' to Spanish.
What is the chemical formula of water?
How many players are on a soccer team?
Which ocean is the largest?
What's the tallest animal?
Rate pizza from 1 to 10.
""".strip().split("\n")

# Hard cases, each with the class its answer calls for.
HARD = [
    ("prose", "What is the difference between a process and a thread? Explain in a few paragraphs."),
    ("prose", "Why is Python slower than C? I want an explanation, not code."),
    ("prose", "What are the philosophical ideas behind the Unix philosophy?"),
    ("prose", "Should our startup use Kubernetes? Give me a reasoned opinion."),
    ("prose", "Explain the history of JavaScript and how it became so popular."),
    ("prose", "What is recursion? Explain it to a child with a story."),
    ("prose", "How do compilers work? Give an overview of the phases."),
    ("prose", "Explain the ethics of open source licensing debates."),
    ("prose", "What makes a senior engineer different from a junior one?"),
    ("prose", "Describe the software development lifecycle."),
    ("code", "sort a list"),
    ("code", "print hello world in C"),
    ("code", "regex for email"),
    ("code", "one-liner to count lines in all .py files"),
    ("code", "kill process on port 3000"),
    ("code", "How do I exit vim?"),
    ("code", "python venv create"),
    ("code", "reverse a string in js"),
    ("code", "git delete remote branch"),
    ("code", "Convert 'hello world' to uppercase in Python."),
    ("code", "Here is my code:\n\ndef f(x):\n    return x +\n\nWhy does it fail?"),
    ("code", "I get 'IndexError: list index out of range' on line 3 of:\nxs = [1, 2]\nfor i in range(3):\n    print(xs[i])"),
    ("code", "What's the time complexity of this?\nfor i in range(n):\n    for j in range(i):\n        pass"),
    ("code", "This SQL is slow: SELECT * FROM orders WHERE YEAR(created) = 2024; how do I rewrite it?"),
    ("short", "What is 3 + 5 * 2?"),
    ("short", "Is Rust memory safe? Yes or no."),
    ("short", "Which is older, Python or Java?"),
    ("short", "What does the acronym SQL stand for?"),
    ("short", "In which year was Git created?"),
    ("short", "Translate to Spanish: Where is the train station?"),
    ("short", "What's the French word for 'computer'?"),
    ("short", "Who invented the telephone?"),
    ("short", "How many bytes in a kilobyte?"),
    ("short", "Is zero an even number?"),
    ("prose", "Write a few paragraphs explaining why the Roman aqueducts were an engineering marvel."),
    ("prose", "Tell me everything you know about the Great Wall of China."),
    ("code", "Write a haiku generator in Python."),
    ("code", "Write a poem-printing program in Go that prints a random line from a list."),
    ("prose", "Write a poem about programming."),
    ("short", "Give me a one-sentence definition of an API."),
    ("short", "One sentence: what is Docker?"),
    ("code", "Show me a Dockerfile for Node 20."),
    ("prose", "Explain Docker to my manager in plain words."),
]

# More phrasings: indirect requests, typos, lowercase chat style, pasted errors, multilingual.
MORE = [
    ("code", "can u write me a python script to rename files"),
    ("code", "need a quick bash thing that deletes logs older than 7 days"),
    ("code", "how to get current timestamp in javascript"),
    ("code", "whats the syntax for a switch statement in java"),
    ("code", "TypeError: 'NoneType' object is not subscriptable — how do I fix it?"),
    ("code", "ModuleNotFoundError: No module named 'requests'"),
    ("code", "error: failed to push some refs to origin. what do i run?"),
    ("code", "Segmentation fault (core dumped) in my C program when I free twice, fix?"),
    ("code", "How do I read a file in Node?"),
    ("code", "Show me how to use map and filter in Kotlin."),
    ("code", "Give me the SQL to find employees earning more than their manager."),
    ("code", "How would I write a retry loop with a timeout in Go?"),
    ("code", "Add error handling to this: data = json.load(open(path))"),
    ("code", "Turn this into a function: total = 0\nfor x in prices: total += x * 1.2"),
    ("code", "Example of a Python context manager please"),
    ("code", "Generate a YAML GitLab CI job that builds a Docker image."),
    ("code", "What's the Linux command to see disk usage per folder?"),
    ("code", "command to check which process uses the most memory"),
    ("code", "How to list all docker containers including stopped ones?"),
    ("code", "Write me an HTML page with a form that has name and email fields."),
    ("code", "css to make an image round"),
    ("code", "Implement a linked list in C with insert and delete."),
    ("code", "Create a REST endpoint in FastAPI that returns a list of items."),
    ("code", "Write unit tests for a function that adds two numbers in JavaScript using Jest."),
    ("code", "Escribe un script de bash que haga una copia de seguridad de mi carpeta home."),
    ("code", "Peux-tu écrire une requête SQL pour compter les utilisateurs actifs ?"),
    ("code", "Wie schreibe ich eine Schleife in JavaScript?"),
    ("code", "Come si legge un file JSON in Python?"),
    ("code", "请用JavaScript写一个防抖函数。"),
    ("code", "Rustで文字列を逆順にするコードを書いて。"),
    ("code", "Print the numbers 1 to 10 in Ruby."),
    ("code", "Write a hello world program in Assembly for x86-64 Linux."),
    ("code", "What does `x ?? y` mean in JavaScript?"),
    ("code", "What does this line do? `awk -F, '{print $2}' data.csv`"),
    ("prose", "can you explain how the stock market crash of 1929 happened"),
    ("prose", "i need help understanding the french revolution for my exam tomorrow"),
    ("prose", "What was life like in ancient Egypt?"),
    ("prose", "How did the Internet start? Tell me the story."),
    ("prose", "What are the arguments for a four-day work week?"),
    ("prose", "Describe your ideal city of the future."),
    ("prose", "Write a thank-you note to a teacher who helped me a lot."),
    ("prose", "Write the opening chapter of a mystery novel set in Venice."),
    ("prose", "What are the lessons of the Apollo 13 mission for managers?"),
    ("prose", "Why do we dream? What do scientists think?"),
    ("prose", "How do I become a better public speaker?"),
    ("prose", "What should I know before adopting a dog?"),
    ("prose", "Explain the rules of cricket."),
    ("prose", "What is the meaning of life according to different philosophers?"),
    ("prose", "Write a welcome message for new members of our hiking club."),
    ("prose", "Compare the leadership styles of Lincoln and Churchill."),
    ("prose", "How does the electoral college work and why is it controversial?"),
    ("prose", "What is object storage and when would a company choose it over block storage?"),
    ("prose", "Why is software estimation so hard? Give your view."),
    ("prose", "What are the social consequences of automation?"),
    ("prose", "Cuéntame la historia de la Alhambra."),
    ("prose", "Décris les avantages et les inconvénients du télétravail."),
    ("prose", "Warum ist der Himmel blau? Erkläre es ausführlich."),
    ("prose", "Raccontami la storia dell'Impero Romano."),
    ("prose", "为什么学习历史很重要？请详细说明。"),
    ("prose", "インターネットの歴史について詳しく教えてください。"),
    ("short", "whats 9 times 7"),
    ("short", "capital of germany"),
    ("short", "how old is the universe"),
    ("short", "Who is the CEO of Tesla?"),
    ("short", "When did the Berlin Wall fall?"),
    ("short", "What's the tallest building in the world?"),
    ("short", "How many ounces in a pound?"),
    ("short", "What's the next number: 2, 4, 8, 16?"),
    ("short", "Which planet is known as the red planet?"),
    ("short", "What is the square of 12?"),
    ("short", "How far is the Moon from Earth?"),
    ("short", "what does lol mean"),
    ("short", "good afternoon!"),
    ("short", "nice, that works"),
    ("short", "Are you there?"),
    ("short", "Translate 'I miss you' into Korean."),
    ("short", "What's 'apple' in German?"),
    ("short", "Quel est le résultat de 6 fois 7 ?"),
    ("short", "¿Cuántos días tiene febrero?"),
    ("short", "Wer hat die Relativitätstheorie entwickelt?"),
    ("short", "Chi ha scritto la Divina Commedia?"),
    ("short", "Quantos planetas existem no sistema solar?"),
    ("short", "一年有多少天？"),
    ("short", "富士山の高さは？"),
    ("short", "Is Java the same as JavaScript? Just yes or no."),
    ("short", "What does SSH stand for?"),
    ("short", "Which port does SSH use by default?"),
    ("short", "How many GB in a TB?"),
]

# Short questions about software (one fact), technical essays, and code asked for indirectly.
MORE2 = [
    ("short", "What port does PostgreSQL listen on by default?"),
    ("short", "Which version of Python added the walrus operator?"),
    ("short", "Is Go garbage collected?"),
    ("short", "What does the 'ls' command do, in one sentence?"),
    ("short", "Who maintains the Linux kernel?"),
    ("short", "What is the file extension of a Rust source file?"),
    ("short", "How many bits is an IPv6 address?"),
    ("short", "Does JavaScript have integers? Yes or no."),
    ("short", "What does JSON stand for?"),
    ("short", "Which company created TypeScript?"),
    ("short", "What's the max value of a signed 32-bit integer?"),
    ("short", "Is HTML a programming language?"),
    ("short", "What year was Python 3 released?"),
    ("short", "What does CSS stand for?"),
    ("short", "Which HTTP status code means not found?"),
    ("short", "What's the default branch name in new GitHub repos?"),
    ("short", "How many cores does a Raspberry Pi 4 have?"),
    ("short", "Name the creator of Linux."),
    ("short", "Which symbol starts a comment in Python?"),
    ("short", "What's the keyboard shortcut to copy on a Mac?"),
    ("short", "Quick question: is 1 a prime number?"),
    ("short", "Give me a word that means very big."),
    ("short", "What's the capital city of Mongolia?"),
    ("short", "Tell me the boiling point of ethanol."),
    ("short", "What is 250 grams in ounces?"),
    ("short", "Who won the 2018 FIFA World Cup?"),
    ("short", "Pick a number from 1 to 100."),
    ("short", "sup"),
    ("short", "Merci beaucoup !"),
    ("short", "¡Hola! ¿Qué tal?"),
    ("prose", "What is the CAP theorem, and how should it shape the design of a distributed database?"),
    ("prose", "Explain the difference between SQL and NoSQL databases and when each fits."),
    ("prose", "Describe how HTTPS keeps a connection private, step by step, in plain language."),
    ("prose", "Why did Java become popular in enterprises? Discuss the history."),
    ("prose", "What are the risks of using too many third-party dependencies in a project?"),
    ("prose", "How should a small team organise its on-call rotation? Give advice."),
    ("prose", "Explain event sourcing and its trade-offs to an architect."),
    ("prose", "What is a monad, explained with everyday analogies rather than code?"),
    ("prose", "Discuss whether programmers should learn assembly today."),
    ("prose", "How do large language models work, at a high level?"),
    ("prose", "Write a post-mortem narrative for an outage caused by an expired certificate."),
    ("prose", "Describe the role of a product manager in a software team."),
    ("prose", "Explain why floating-point arithmetic is imprecise, conceptually."),
    ("prose", "What are the stages of a typical machine learning project?"),
    ("prose", "Tell me the story of how Linux was created."),
    ("prose", "Write a short essay on privacy in the age of smartphones."),
    ("prose", "Give me a detailed plan for learning data science in six months."),
    ("prose", "Compare living in a big city with living in the countryside."),
    ("prose", "Why did the Soviet Union collapse?"),
    ("prose", "What can we learn from the history of pandemics?"),
    ("prose", "Write a letter of recommendation for a former intern."),
    ("prose", "Explain the rules and strategy of chess for a beginner."),
    ("prose", "Summarize the key ideas of Thinking, Fast and Slow in a few paragraphs."),
    ("prose", "How do airplanes stay in the air? Explain the physics."),
    ("prose", "Écris un court essai sur l'importance de la lecture."),
    ("prose", "Explícame cómo funciona la democracia representativa."),
    ("code", "I need to parse dates like 31/12/2024 in Java, how?"),
    ("code", "Give me the code for a binary search tree insert."),
    ("code", "Sum all even numbers in a list, Python one-liner."),
    ("code", "make a function that capitalizes each word"),
    ("code", "How do I check if a key exists in a dictionary?"),
    ("code", "How do I append to a file in Python?"),
    ("code", "What's the command to create a new branch and switch to it?"),
    ("code", "Write a SQL statement that updates prices by 10 percent."),
    ("code", "Show an example of a Python f-string with a float rounded to 2 decimals."),
    ("code", "Write the HTML for a table with three columns."),
    ("code", "Give me a PowerShell one-liner to find files larger than 1GB."),
    ("code", "How do I run a command every 5 minutes with cron?"),
    ("code", "Create a Python enum for the days of the week."),
    ("code", "What's wrong with `if x = 5:` in Python?"),
    ("code", "How do I convert a string to an int in C#?"),
    ("code", "Open a file and count its lines in Go."),
    ("code", "Write a simple tic-tac-toe game in Python for the terminal."),
    ("code", "Build me a landing page in HTML and CSS for a bakery."),
    ("code", "Write a program that prints a multiplication table."),
    ("code", "Write a Dockerfile that runs a static site with nginx."),
    ("code", "Give me a regex to remove trailing whitespace from lines."),
    ("code", "Write a script that pings a list of hosts and reports which are down."),
    ("code", "Scrivi un programma Java che stampa i numeri primi fino a 100."),
    ("code", "Schreibe ein SQL-Statement, das alle Kunden aus Berlin auswählt."),
]
